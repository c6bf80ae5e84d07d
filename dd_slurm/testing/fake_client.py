"""A minimal generation client for tests: reads the endpoints file, asks each model alias's one
logical URL (`models[alias]["url"]`), writes JSONL. Sends `Authorization: Bearer` with the value of
the `--api-key-env` variable when it is set (the runtime puts the attempt key there)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from typing import cast


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fake_client")
    p.add_argument("--endpoints", required=True)
    p.add_argument("--out")
    p.add_argument("--records", type=int, default=3, help="records per model alias")
    p.add_argument("--preflight", action="store_true", help="check the endpoints file only; no model calls")
    p.add_argument("--exit-code", type=int, default=0, help="exit with this code after writing")
    p.add_argument("--hang", action="store_true", help="never finish")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to wait before doing anything")
    p.add_argument("--tag", default=None, help="written into every record (e.g. {shard_index}/{num_shards})")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="variable holding the key to send, if set")
    p.add_argument("--until-signalled", action="store_true",
                   help="keep writing records (a 503 is waited out) until SIGTERM, SIGINT or SIGUSR1; then exit 0")
    p.add_argument("--torn-tail", action="store_true", help="with --until-signalled: end with half a line")
    p.add_argument("--concurrency", type=int, default=1, help="requests in flight at once (each record once)")
    p.add_argument("--retries", type=int, default=0,
                   help="retry a request answered 502/503 or not answered, as the Data Designer client does")
    p.add_argument("--metrics-out", default=None,
                   help="with --until-signalled: after 5 records, GET the gateway's /metrics with the key into this "
                        "file, and the status it answers without the key into FILE.without-key")
    return p.parse_args(argv)


def scrape_metrics(url: str, key: str | None, out: str) -> None:
    """The gateway's /metrics (its root: the alias URL without `/<alias>/v1`), with and without the key."""
    import urllib.error

    root = url.rsplit("/", 2)[0]
    request = urllib.request.Request(f"{root}/metrics", headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=30) as response, open(out, "wb") as handle:
        handle.write(response.read())
    try:
        urllib.request.urlopen(f"{root}/metrics", timeout=30).close()
        status = 200
    except urllib.error.HTTPError as err:
        status = err.code
    with open(out + ".without-key", "w") as handle:
        handle.write(f"{status}\n")


def until_signalled(args: argparse.Namespace, endpoints: dict[str, str | None]) -> int:
    """One record after another, each a whole line flushed at once, until a stop signal; the
    request in flight when it lands is finished and written first."""
    import signal
    import urllib.error

    stopped: list[int] = []
    for signo in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(signo, lambda got, _frame: stopped.append(got))
    key, written = os.environ.get(args.api_key_env), 0
    with open(args.out, "w") as out:
        while not stopped:
            alias, url = sorted(endpoints.items())[written % len(endpoints)]
            try:
                text = chat(cast(str, url), alias, f"record {written}", key)
            except urllib.error.HTTPError as err:
                if err.code != 503:
                    raise
                time.sleep(0.2)  # the gateway drains: the stop signal comes next
                continue
            out.write(json.dumps({"alias": alias, "index": written, "text": text}) + "\n")
            out.flush()
            written += 1
            if written == 5 and args.metrics_out:
                scrape_metrics(cast(str, url), key, args.metrics_out)
        if args.torn_tail:
            out.write('{"alias": "torn')
    print(f"stopped by signal {stopped[0]} after {written} records", flush=True)
    return 0


def load_endpoints(path: str, preflight: bool = False) -> dict[str, str | None]:
    """alias -> its logical URL (null allowed only while planned, for the preflight)."""
    with open(path) as handle:
        data = json.load(handle)
    if data.get("schema") != 2:
        raise ValueError(f"endpoints schema {data.get('schema')!r} is not 2")
    models = data["models"]
    if not models or not all(isinstance(v["url"], str) or (preflight and v["url"] is None) for v in models.values()):
        raise ValueError("every model alias needs its URL")
    return {alias: spec["url"] for alias, spec in models.items()}


def chat(base_url: str, alias: str, prompt: str, key: str | None = None) -> str:
    body = {"model": alias, "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}]}
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        reply = json.load(response)
    return reply["choices"][0]["message"]["content"]


def chat_retrying(base_url: str, alias: str, prompt: str, key: str | None, retries: int) -> str:
    """`chat`, again after a 502/503 or a broken connection, up to `retries` more times."""
    import urllib.error

    for attempt in range(retries + 1):
        try:
            return chat(base_url, alias, prompt, key)
        except urllib.error.HTTPError as err:
            if err.code not in (502, 503) or attempt == retries:
                raise
        except (ConnectionError, urllib.error.URLError):
            if attempt == retries:
                raise
        time.sleep(min(2.0, 0.1 * 2 ** attempt))
    raise AssertionError("unreachable")


def write_records(args: argparse.Namespace, endpoints: dict[str, str | None]) -> None:
    """`--records` per alias, `--concurrency` at once; each record written once, when answered."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    key, lock = os.environ.get(args.api_key_env), threading.Lock()
    with open(args.out, "w") as out:
        def one(job: tuple[str, str, int]) -> None:
            alias, url, index = job
            text = chat_retrying(url, alias, f"record {index}", key, args.retries)
            record = {"alias": alias, "index": index, "text": text}
            with lock:
                out.write(json.dumps(record if args.tag is None else {**record, "tag": args.tag}) + "\n")

        jobs = [(alias, cast(str, url), index) for alias, url in sorted(endpoints.items()) for index in range(args.records)]
        with ThreadPoolExecutor(max(1, args.concurrency)) as pool:
            for _ in pool.map(one, jobs):
                pass


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    time.sleep(args.sleep)
    endpoints = load_endpoints(args.endpoints, args.preflight)
    if args.preflight:
        print(f"preflight {'ok' if args.exit_code == 0 else 'failed'}: {sorted(endpoints)}", flush=True)
        return args.exit_code
    while args.hang:
        time.sleep(3600)
    if args.until_signalled:
        return until_signalled(args, endpoints)
    write_records(args, endpoints)
    print(f"wrote {args.records * len(endpoints)} records", flush=True)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
