"""A local S3-compatible server for the object-storage tests: moto's server mode on 127.0.0.1, with
request signing enforced, run as its own process (so no request of the extension ever waits on
the test process's GIL, and a hung server can be killed by its pid).

Usage: python s3_server.py BUCKET...  Prints one line of JSON, {"endpoint", "access_key",
"secret_key", "region"}, once the buckets exist and signatures are checked, then serves until its
standard input closes.

Signatures: moto checks SigV4 only when IAM auth is on (INITIAL_NO_AUTH_ACTION_COUNT), against
the keys of an IAM user it created, so a wrong secret gets 403 SignatureDoesNotMatch as on AWS.
moto rebuilds the canonical request from the raw URL without percent-encoding the query (`/` in
`prefix=wh/db.db/...&delimiter=/`, as opendal/paimon-rust sends it), so every LIST signed by
paimon-rust would fail; the patch below encodes the query the way SigV4 (and AWS) canonicalizes
it. Nothing else of moto is changed.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

import boto3
import moto.iam.access_control as access_control
from moto import settings
from moto.core.authorization import ActionAuthenticatorMixin
from moto.server import ThreadedMotoServer

REGION = "us-east-1"
_create_aws_request = access_control.IAMRequestBase._create_aws_request


def _canonical_query_request(self):
    request = _create_aws_request(self)
    parts = urlsplit(request.url)
    if parts.query:
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in pairs)
        request.url = urlunsplit(parts._replace(query=query))
    return request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(buckets: list[str]) -> None:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    access_control.IAMRequestBase._create_aws_request = _canonical_query_request
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        # Set up while requests are not yet authenticated: an IAM user allowed everything, its key.
        anon = {"endpoint_url": endpoint, "region_name": REGION, "aws_access_key_id": "setup"}
        iam = boto3.client("iam", aws_secret_access_key="setup", **anon)
        iam.create_user(UserName="lake")
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="lake", PolicyName="all", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="lake")["AccessKey"]
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id=key["AccessKeyId"],
            aws_secret_access_key=key["SecretAccessKey"],
        )
        for bucket in buckets:
            s3.create_bucket(Bucket=bucket)
        # From here on every request must be signed with that key.
        settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
        ActionAuthenticatorMixin.request_count = 0
        info = {
            "endpoint": endpoint,
            "access_key": key["AccessKeyId"],
            "secret_key": key["SecretAccessKey"],
            "region": REGION,
        }
        sys.stdout.write(json.dumps(info) + "\n")
        sys.stdout.flush()
        sys.stdin.read()  # until the parent closes our stdin (or exits)
    finally:
        server.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
