"""The fuzz's cases (fuzz/test_fuzz.py): how each SQL function is called with an edge value (call
forms, argument forms), the fixed corpus, the seeded random cases, and the sandbox lane's cases."""

from __future__ import annotations

import random
from dataclasses import dataclass

from support import fuzz_worker as fw
from support.fuzz_env import Env, spec_name
from support.fuzz_values import CAST_VALUES, INTERVALS, NUMBERS, STRINGS_STATIC, S, V

# ------------------------------------------------------------------------------------------------
# Cases.
# ------------------------------------------------------------------------------------------------

TEXT_FUNCS = [
    "serving_build",
    "serving_refresh",
    "serving_dashboard",
    "serving_olap",
    "serving_explain",
    "serving_follow",
]
LAKE_FUNCS = ["paimon_scan", "paimon_changelog", "paimon_snapshots"]
NAMED = {"paimon_scan": "snapshot", "paimon_changelog": "from_snapshot", "serving_follow": "every"}
MUTATING = {"serving_build", "serving_refresh", "serving_follow"}
ORACLE_FUNCS = {"serving_dashboard", "serving_olap"}
FORMS = [
    "param",
    "literal",
    "typed",
    "concat",
    "subquery",
    "lateral",
    "prepare",
    "explain",
    "cte",
    "union",
    "txn",
    "describe",
    "ctas",
]


# Expressions the gate must refuse, and the call a refusal must name (issue 51).
GATE_HOSTILE = [
    ("\"CURRENT_SETTING\"('threads')", "current_setting"),
    ('"RANDOM"()', "random"),
    ('"UuId"()', "uuid"),
    ("now()", "now"),
    ("current_date", "current_date"),
    ('main."Random"()', "random"),
    ('"system".main."GETENV"(\'HOME\')', "getenv"),
    ('upper(CAST("Gen_Random_Uuid"() AS VARCHAR))', "gen_random_uuid"),
    ("ago(INTERVAL 1 DAY)", "ago"),
    ("sum(1)", "sum"),
    ("(SELECT 1)", "select"),
    ("nosuch_fn(1)", "nosuch_fn"),
    ('coalesce(NULL, "SetSeed"(0.5))', "setseed"),
    ('abs(-1) + "Random"()', "random"),
    ('"Current_LocalTimestamp"()', "current_localtimestamp"),
]


@dataclass
class Case:
    id: int
    sql: object  # str or list of str
    params: list
    labels: list
    func: str
    mutating: bool = False
    check: dict | None = None
    kind: str = "sql"
    corruption: dict | None = None
    lane: str = "plain"  # plain | sandbox | unpriv
    value_label: str | None = None  # the main argument, for the message check
    value: object = None
    big: bool = False  # carries a huge value: a longer time budget
    deep: bool = True  # after a failed serving_refresh, prove a known refresh still lands exactly
    hazard: str | None = None  # what makes it likely to hang (FIFO, /dev/zero...), for the hang cap
    may_change: bool = False  # a failed statement may still hold a successful build (two calls in one)

    def wire(self) -> dict:
        d = {
            "id": self.id,
            "kind": self.kind,
            "sql": self.sql,
            "params": [fw.encode(p) for p in self.params],
            "mutating": self.mutating,
            "func": self.func,
            "deep": self.deep,
            "may_change": self.may_change,
        }
        if self.check:
            d["check"] = {k: fw.encode(v) for k, v in self.check.items()}
        if self.corruption:
            d["corruption"] = self.corruption
        return d

    def repro(self) -> str:
        if self.kind in ("lake_refresh", "lake_follow"):
            call = (
                "SELECT * FROM serving_follow('paimon:' || P, every := INTERVAL '10 milliseconds');\n"
                "-- wait 0.3 s\nSELECT * FROM serving_status();\nSELECT * FROM serving_unfollow()"
                if self.kind == "lake_follow"
                else "SELECT * FROM serving_refresh('paimon:' || P);\nSELECT * FROM serving_status()"
            )
            return (
                f"-- build from a clean copy of the 2-snapshot lake table P: SELECT * FROM "
                f"serving_build('paimon:' || P);\n-- add snapshot 3 and corrupt it "
                f"({spec_name(self.corruption)}), then:\n" + call
            )
        stmts = self.sql if isinstance(self.sql, list) else [self.sql]
        text = ";\n".join(s if len(s) < 400 else s[:200] + f"...<{len(s)} chars>" for s in stmts)
        if self.params:
            text += "\n-- parameters: " + ", ".join(self.labels)
        return text


def call_sql(func: str, form: str, args_sql: list[str], named: str = "") -> tuple[object, bool]:
    """SQL calling table function `func` with argument expressions; returns (sql, uses_params)."""
    inner = ", ".join(args_sql) + named
    call = f"{func}({inner})"
    if form == "explain":
        return f"EXPLAIN SELECT * FROM {call}", True
    if form == "describe":
        return f"DESCRIBE SELECT * FROM {call}", True
    if form == "cte":
        return f"WITH c AS (SELECT * FROM {call}) SELECT * FROM c", True
    if form == "txn":
        return ["BEGIN TRANSACTION", f"SELECT * FROM {call}"], True
    if form == "ctas":
        return f"CREATE OR REPLACE TEMP TABLE fz_out AS SELECT * FROM {call}", True
    return f"SELECT * FROM {call}", True


def arg_expr(form: str, v: V) -> tuple[str, list]:
    """(SQL expression, params) for one argument in `form`."""
    if form == "literal":
        return v.sql(), []
    if v.literal is not None and form not in ("lateral",):
        # Values only expressible in SQL.
        inner = v.literal
        if form == "typed":
            return f"CAST({inner} AS VARCHAR)", []
        if form == "concat":
            return f"({inner} || '')", []
        if form == "subquery":
            return f"(SELECT {inner})", []
        return inner, []
    if form == "typed":
        return "CAST(? AS VARCHAR)", [v.value]
    if form == "concat":
        return "(? || '')", [v.value]
    if form == "subquery":
        return "(SELECT ?)", [v.value]
    return "?", [v.value]


def hazard_of(labels) -> str | None:
    """What may make a case hang, so that a hang is charged to its cause (see fuzz_runner.HANG_CAP)."""
    text = " ".join(labels).lower()
    if "named ." in text and ("fifo" in text or "/dev/zero" in text or "socket" in text):
        return "a FIFO / device / socket as a file source"
    if "fifo" in text:
        return "a FIFO inside a Paimon table"
    if "dev_zero" in text:
        return "/dev/zero inside a Paimon table"
    for h in ("socket", "1 mb path", "/dev/stdin", "/proc/self/mem", "/dev/zero"):
        if h in text:
            return h
    return None


class Generator:
    def __init__(self, env: Env, rng: random.Random):
        self.env = env
        self.rng = rng
        self.n = 0
        self.lake_values = env.lake_paths

    def next_id(self) -> int:
        self.n += 1
        return self.n

    def lane_for(self, labels) -> str:
        if any(u in lbl for lbl in labels for u in self.env.unreadable):
            return "unpriv" if (self.env.can_drop or not self.env.privileged) else "skip"
        return "plain"

    def table_call(self, func: str, v: V, form: str, named: tuple[str, V] | None = None, extra: str = "") -> Case:
        rng = self.rng
        if form == "lateral":
            params = [v.value] if v.literal is None else []
            src = "(SELECT ? AS v)" if v.literal is None else f"(SELECT {v.literal} AS v)"
            sql = f"SELECT f.* FROM {src} a, {func}(a.v) f"
            if rng.random() < 0.5:
                sql = f"SELECT f.* FROM fz_args a, {func}(a.s) f"
                params = []
            return self._case(sql, params, [v.label], func, v)
        if form == "prepare":
            expr, params = arg_expr("param", v)
            named_sql = ""
            if named:
                named_sql = f", {named[0]} := {named[1].sql()}"
            sql = [
                f"PREPARE fzp AS SELECT * FROM {func}($1{named_sql})",
                f"EXECUTE fzp({v.sql() if v.literal is not None or isinstance(v.value, (bytes,)) else '?'})",
            ]
            params = [] if (v.literal is not None or isinstance(v.value, bytes)) else [v.value]
            return self._case(sql, params, [v.label], func, v)
        expr, params = arg_expr(form if form not in FORMS[5:] or form == "subquery" else "param", v)
        if form in ("explain", "describe", "cte", "txn", "ctas", "union") and rng.random() < 0.5:
            expr, params = v.sql(), []
        named_sql = ""
        labels = [v.label]
        if named:
            nexpr, nparams = arg_expr(rng.choice(["param", "literal"]), named[1])
            named_sql = f", {named[0]} := {nexpr}"
            params = params + nparams
            labels.append(f"{named[0]} := {named[1].label}")
        named_sql += extra
        if form == "union":
            other = rng.choice(self.env.strings)
            oexpr = other.sql()
            sql = (
                f"SELECT count(*) FROM (SELECT * FROM {func}({expr}{named_sql}) "
                f"UNION ALL SELECT * FROM {func}({oexpr}{named_sql}))"
            )
            labels.append(other.label)
            # The same params appear once: the second call uses a literal. The error may name either.
            # Each build/refresh commits on its own (README): when one of the two succeeds and the
            # other fails, the statement fails but the successful call's layer stays.
            c = self._case(sql, params, labels, func, v)
            c.value = None
            c.may_change = func in MUTATING
            return c
        sql, _ = call_sql(func, form, [expr], named_sql)
        case = self._case(sql, params, labels, func, v)
        if named or extra:
            case.value = None  # the error may rightly name the other argument instead
        if (
            func in ORACLE_FUNCS
            and form in ("param", "literal", "typed")
            and isinstance(v.value, str)
            and v.literal is None
            and not named
            and not extra
        ):
            case.check = {"oracle": v.value}
        return case

    def _case(self, sql, params, labels, func, v: V | None) -> Case:
        c = Case(self.next_id(), sql, params, labels, func, mutating=func in MUTATING)
        c.lane = self.lane_for(labels)
        c.big = any(isinstance(p, str) and len(p) > 50_000 for p in params) or len(str(sql)) > 50_000
        c.hazard = hazard_of(labels)
        if v is not None:
            c.value_label, c.value = v.label, v.value
        return c

    def scalar(self, func: str, v: V, form: str, a: V | None = None, b: V | None = None) -> Case:
        rng = self.rng
        nums = [a, b] if func == "paimon_tier_upsert" else []
        labels = [v.label] + [n.label for n in nums]
        if form == "range" and isinstance(v.value, str) and len(v.value) > 10_000:
            form = "column"  # 5000 rows of a 1 MB string would test the machine, not the function
        if form == "column":
            # Non-constant vectors: a VALUES list with the value among others, many rows, NULLs.
            rows = ["(?)", "('acme')", "(NULL)", "('a.b')"]
            rng.shuffle(rows)
            args = ["v"] + [n.sql() for n in nums]
            sql = f"SELECT {func}({', '.join(args)}) FROM (VALUES {', '.join(rows)}) t(v)"
            params = [v.value] if v.literal is None else []
            if v.literal is not None:
                sql = sql.replace("(?)", f"({v.literal})")
            return self._case(sql, params, labels, func, v)
        if form == "range":
            args = ["CASE WHEN i % 3 = 0 THEN NULL WHEN i % 3 = 1 THEN 'lake.t' || i ELSE ? END"]
            if nums:
                args += ["(i % 7)::INT - 3", f"CASE WHEN i % 5 = 0 THEN NULL ELSE {nums[1].sql()} END"]
            sql = f"SELECT count(*), max(length(x)) FROM (SELECT {func}({', '.join(args)}) AS x FROM range(5000) t(i))"
            params = [v.value] if v.literal is None else []
            if v.literal is not None:
                sql = sql.replace("ELSE ? END", f"ELSE {v.literal} END")
            return self._case(sql, params, labels, func, v)
        exprs, params = [], []
        for arg in [v, *nums]:
            e, p = arg_expr(form if arg is v else rng.choice(["param", "literal"]), arg)
            exprs.append(e)
            params += p
        sql = f"SELECT {func}({', '.join(exprs)})"
        if form == "prepare":
            sql = [
                f"PREPARE fzs AS SELECT {func}({', '.join('$' + str(i + 1) for i in range(len(exprs)))})",
                f"EXECUTE fzs({', '.join(x.sql() for x in [v, *nums])})",
            ]
            params = []
        return self._case(sql, params, labels, func, v)

    # -- the fixed corpus ----------------------------------------------------------------------
    def corpus(self) -> list[Case]:
        """Every edge value through every function once (as a prepared parameter, or its SQL
        literal when it has no Python form), a sample as literals, every call form once, every
        corruption once; a balance that keeps `make test` short."""
        rng = self.rng
        env = self.env
        out = []
        values = env.strings + CAST_VALUES

        def natural(v):
            return "param" if v.literal is None else "literal"

        # The source parser (build) and the company binding (dashboard) see every value; the
        # functions sharing their code see a third (random cases and `make fuzz` see the rest).
        share = {
            "serving_build": 1,
            "serving_dashboard": 1,
            "serving_refresh": 3,
            "serving_olap": 3,
            "serving_explain": 3,
            "serving_follow": 3,
        }
        for func in TEXT_FUNCS:
            for v in values:
                if share[func] == 1 or rng.randrange(share[func]) == 0:
                    out.append(self.table_call(func, v, natural(v)))
            short = [v for v in values if isinstance(v.value, str) and v.literal is None and len(v.value) < 200]
            for v in rng.sample(short, 15):
                out.append(self.table_call(func, v, "literal"))
            for form in FORMS:
                out.append(self.table_call(func, rng.choice(values), form))
        # serving_follow's every := INTERVAL, on the lake table (the layer is not built from it: the
        # call must refuse cleanly whatever `every` is) and on the table it was built from.
        for n in INTERVALS + NUMBERS[:12]:
            out.append(
                self.table_call(
                    "serving_follow",
                    V("'paimon:' || <lake orders_s3>", "paimon:" + self.lake_values[0].value),
                    "param",
                    ("every", n),
                )
            )
            out.append(self.table_call("serving_follow", S("fz_base"), "param", ("every", n)))
        # Every writer's wait := INTERVAL (how long it waits for a running writer).
        for n in INTERVALS + NUMBERS[:6]:
            out.append(self.table_call("serving_build", S("fz_base"), "param", ("wait", n)))
            out.append(self.table_call("serving_refresh", S("fz_changes"), "param", ("wait", n)))
        # on_bad_rows := anything but 'fail' or 'quarantine' is refused naming the value (a fixed
        # slice: drawing from the RNG here would move every random case after it).
        for v in STRINGS_STATIC[:12] + CAST_VALUES[:4]:
            out.append(self.table_call("serving_build", S("fz_base"), "param", ("on_bad_rows", v)))
            out.append(self.table_call("serving_refresh", S("fz_changes"), "param", ("on_bad_rows", v)))
        # The expression gate (issue 51): hostile columns := and deleted := expressions (quoted,
        # cased, qualified, nested, through a built-in macro) must be refused naming the call (a
        # fixed slice, so the seeded random cases stay where they were).
        for expr, name in GATE_HOSTILE:
            typed = "CAST((" + expr + ") AS VARCHAR)"
            columns = ", columns := MAP {'company': '" + typed.replace("'", "''") + "'}"
            case = self.table_call("serving_build", S("fz_base"), "param", extra=columns)
            case.check = {"refused": name}
            out.append(case)
            case = self.table_call("serving_refresh", S("fz_changes"), "param", ("deleted", S(f"({expr}) IS NULL")))
            case.check = {"refused": name}
            out.append(case)
        lake_args = (
            [v for v in self.lake_values if not v.label.startswith("<c")] + CAST_VALUES + rng.sample(STRINGS_STATIC, 30)
        )
        for func in LAKE_FUNCS:
            for v in lake_args:
                out.append(self.table_call(func, v, natural(v)))
            for form in FORMS:
                out.append(self.table_call(func, rng.choice(self.lake_values[:5]), form))
            if func in NAMED:
                for n in NUMBERS:
                    out.append(self.table_call(func, rng.choice(self.lake_values[:3]), "param", (NAMED[func], n)))
                # Wrong, duplicated and extra parameters.
                good = self.lake_values[0]
                for extra in [
                    ", snapshot := 1, snapshot := 2",
                    ", from_snapshot := 1, snapshot := 1",
                    ", nope := 1",
                    ", 1",
                    ", snapshot := 'abc'",
                    ", snapshot := NULL::VARCHAR",
                    ", snapshot := [1]",
                    ", snapshot := (SELECT 1)",
                    ", snapshot := random()::BIGINT",
                ]:
                    out.append(self.table_call(func, good, "literal", extra=extra))
        for v in values:
            out.append(self.scalar("paimon_tier_ddl", v, natural(v)))
            out.append(self.scalar("paimon_tier_upsert", v, natural(v), rng.choice(NUMBERS), rng.choice(NUMBERS)))
        for n in NUMBERS:
            out.append(self.scalar("paimon_tier_upsert", S("lake.t"), "literal", n, rng.choice(NUMBERS)))
            out.append(self.scalar("paimon_tier_upsert", S("lake.t"), "param", rng.choice(NUMBERS[:10]), n))
        for func in ("paimon_tier_ddl", "paimon_tier_upsert"):
            for form in ("column", "range", "prepare", "typed", "concat"):
                for v in rng.sample(values, 4):
                    out.append(self.scalar(func, v, form, rng.choice(NUMBERS), rng.choice(NUMBERS)))
            # The whole string pool as one column (1 MB strings included).
            args = "s" if func == "paimon_tier_ddl" else "s, 1, 2"
            out.append(self._case(f"SELECT count({func}({args})) FROM fz_strs", [], ["<every string>"], func, None))
            out.append(
                self._case(
                    f"SELECT count({func}({args})) FROM fz_strs WHERE s NOT LIKE '%.%' AND s <> ''",
                    [],
                    ["<strings without dots>"],
                    func,
                    None,
                )
            )
        for func in ("serving_reconcile", "serving_status", "serving_unfollow"):
            for sql in [
                f"SELECT * FROM {func}()",
                f"EXPLAIN SELECT * FROM {func}()",
                f"DESCRIBE SELECT * FROM {func}()",
                f"SELECT count(*) FROM (SELECT * FROM {func}() UNION ALL SELECT * FROM {func}())",
                ["BEGIN TRANSACTION", f"SELECT * FROM {func}()"],
                f"SELECT * FROM {func}(NULL)",
                f"SELECT * FROM {func}('x')",
                f"SELECT * FROM {func}(42)",
                [f"PREPARE fzr AS SELECT * FROM {func}()", "EXECUTE fzr"],
                f"SELECT * FROM fz_args, {func}()",
                f"SELECT {func}()",
            ]:
                out.append(self._case(sql, [], [], func, None))
        for arg in ("", "42", "'x'", "NULL"):
            out.append(self._case(f"SELECT * FROM __streamhouse_handoff({arg})", [], [], "__streamhouse_handoff", None))
        # Every corruption once through a lake function or a build (rotating); a lake refresh (the
        # costliest case) for every file action, on rotating files, and for every kind of JSON edit.
        funcs = [*LAKE_FUNCS, "serving_build", "scan_old", "changelog_from"]
        for i, (v, _spec) in enumerate(env.corrupt):
            out.append(self.lake_case(funcs[i % len(funcs)], v))
        seen = set()
        for i, action in enumerate(fw.FILE_ACTIONS):
            specs = [sp for sp in env.specs if sp["kind"] == "file" and sp["action"] == action]
            out.append(self.lake_refresh(specs[i % len(specs)]))
        for spec in env.specs:
            if spec["kind"] == "json" and spec["edit"][0] not in seen:
                seen.add(spec["edit"][0])
                out.append(self.lake_refresh(spec))
        # A follower meeting a corrupt table: it must fail cleanly, change nothing, and stop.
        for want in [
            ("none", None),
            ("snapshot_latest", "truncate_half"),
            ("data", "garbage"),
            ("manifest", "delete"),
            ("snapshot_latest", "fifo"),
            ("data", "fifo"),
            ("schema", "dev_zero"),
            ("LATEST", "chmod000"),
            ("deltaManifestList", "flip"),
        ]:
            spec = (
                {"kind": "none"}
                if want[0] == "none"
                else next(sp for sp in env.specs if sp["kind"] == "file" and (sp["selector"], sp["action"]) == want)
            )
            out.append(self.lake_refresh(spec, follow=True))
        # The known-refresh proof after a failed refresh costs a refresh and a rebuild: in the
        # corpus every 4th failing plain refresh gets it (lake refreshes and random cases always).
        plain_refreshes = [c for c in out if c.func == "serving_refresh" and c.kind == "sql"]
        for i, c in enumerate(plain_refreshes):
            c.deep = i % 4 == 0
        return out

    def lake_case(self, f: str, v: V) -> Case:
        if f == "serving_build":
            return self.table_call("serving_build", V("'paimon:' || " + v.label, "paimon:" + v.value), "param")
        if f == "scan_old":
            return self.table_call("paimon_scan", v, "param", ("snapshot", NUMBERS[1]))
        if f == "changelog_from":
            return self.table_call("paimon_changelog", v, "param", ("from_snapshot", NUMBERS[3]))
        return self.table_call(f, v, "param")

    def lake_refresh(self, spec, follow: bool = False) -> Case:
        c = Case(
            self.next_id(),
            None,
            [],
            [spec_name(spec)],
            "serving_follow" if follow else "serving_refresh",
            mutating=True,
            kind="lake_follow" if follow else "lake_refresh",
            corruption=spec,
        )
        c.hazard = hazard_of(c.labels)
        if spec["kind"] == "file" and spec["action"] == "chmod000":
            c.lane = "unpriv" if (self.env.can_drop or not self.env.privileged) else "skip"
        return c

    # -- random cases ------------------------------------------------------------------------------
    def mutate(self, s: str) -> str:
        rng = self.rng
        ops = rng.randrange(1, 4)
        for _ in range(ops):
            op = rng.randrange(7)
            pos = rng.randrange(len(s) + 1)
            if op == 0:
                s = (
                    s[:pos]
                    + rng.choice(["\x00", "\n", "'", '"', ".", "/", "..", "\\", "😀", "\x7f", " ", "%", "*"])
                    + s[pos:]
                )
            elif op == 1 and s:
                s = s[:pos] + s[pos + 1 :]
            elif op == 2:
                s = s[:pos]
            elif op == 3:
                s = s + rng.choice(["/", "/.", "/..", "/snapshot", "/schema/schema-0", ".parquet", ".csv", "\x00"])
            elif op == 4:
                s = s.upper() if rng.random() < 0.5 else s.swapcase()
            elif op == 5:
                s = "paimon:" + s
            else:
                s = s * rng.randrange(2, 4)
        return s

    def random_case(self) -> Case:
        rng = self.rng
        r = rng.random()
        pool = self.env.strings + CAST_VALUES
        if r < 0.45:
            func = rng.choice(TEXT_FUNCS + LAKE_FUNCS)
            v = rng.choice(self.lake_values) if func in LAKE_FUNCS and rng.random() < 0.6 else rng.choice(pool)
            if isinstance(v.value, str) and v.literal is None and len(v.value) < 5000 and rng.random() < 0.4:
                m = self.mutate(v.value)
                v = S(m)
            named = None
            if func in NAMED and rng.random() < 0.5:
                named = (NAMED[func], rng.choice(NUMBERS))
            return self.table_call(func, v, rng.choice(FORMS), named)
        if r < 0.6:
            func = rng.choice(["paimon_tier_ddl", "paimon_tier_upsert"])
            v = rng.choice(pool)
            if isinstance(v.value, str) and v.literal is None and len(v.value) < 5000 and rng.random() < 0.5:
                v = S(self.mutate(v.value))
            form = rng.choice(["param", "literal", "typed", "concat", "column", "range", "prepare"])
            return self.scalar(func, v, form, rng.choice(NUMBERS), rng.choice(NUMBERS))
        if r < 0.85:
            f = rng.choice([*LAKE_FUNCS, "serving_build", "scan_old", "changelog_from"])
            v, spec = rng.choice(self.env.corrupt)
            return self.lake_case(f, v)
        if r < 0.9:
            spec = rng.choice(self.env.specs)
            return self.lake_refresh(spec, follow=rng.random() < 0.25)
        # Sequences: a hostile call between good ones, in one statement batch.
        func = rng.choice(TEXT_FUNCS)
        v = rng.choice(pool)
        expr, _params = arg_expr("literal", v)
        sql = ["SELECT * FROM serving_dashboard('acme')", f"SELECT * FROM {func}({expr})"]
        c = self._case(sql, [], [v.label], func, v)
        return c


def sandbox_cases(gen: Generator) -> list[Case]:
    """The path-taking functions under enable_external_access = false (allowed: the fuzz root)."""
    out = []
    paths = [
        v for v in gen.env.strings if isinstance(v.value, str) and ("/" in v.value or v.value.startswith("paimon"))
    ]
    for func in ["paimon_scan", "serving_build"]:
        for i, v in enumerate([*paths, gen.env.lake_paths[0]]):
            if func == "serving_build" and i % 2:
                continue
            c = gen.table_call(func, v, "param")
            if c.lane == "plain":
                c.lane = "sandbox"
                out.append(c)
    return out
