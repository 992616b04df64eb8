/*
 * The lake tiering service of scripts/fluss_cluster.py: Fluss's own FlussLakeTieringEntrypoint, unchanged,
 * with the local Flink MiniCluster it runs in bound to 127.0.0.1. On its own the entrypoint gives Flink a
 * configuration of its own making, and the MiniCluster then binds its BLOB server and REST endpoint to
 * every interface; a context environment is the one way in without changing Fluss.
 *
 * No build step: the JDK's single-file source launcher compiles it at start,
 *   java -cp 'build/jvm/tiering/*' jvm/LoopbackTiering.java --fluss.bootstrap.servers ... (the entrypoint's arguments)
 */
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.fluss.flink.tiering.FlussLakeTieringEntrypoint;

public class LoopbackTiering extends StreamExecutionEnvironment {
    public static void main(String[] args) throws Exception {
        initializeContextEnvironment(
                entrypointConfig -> {
                    Configuration config = new Configuration();
                    for (String key :
                            new String[] {
                                "rest.address",
                                "rest.bind-address",
                                "jobmanager.bind-host",
                                "jobmanager.rpc.address",
                                "taskmanager.bind-host",
                                "taskmanager.host"
                            }) {
                        config.setString(key, "127.0.0.1");
                    }
                    config.addAll(entrypointConfig);
                    // what LocalStreamEnvironment sets (it refuses to be made inside a context environment)
                    config.setString("execution.target", "local");
                    config.setString("execution.attached", "true");
                    return new StreamExecutionEnvironment(config);
                });
        FlussLakeTieringEntrypoint.main(args);
    }
}
