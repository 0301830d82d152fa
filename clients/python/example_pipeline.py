#!/usr/bin/python3
"""Uploads a checkpoint to lrkvd, runs a pipeline job (convert to LRKV at a cache
budget -> heal -> verify -> bench), follows its progress and prints the report.
Exit 0 when every verification check passed, 1 when one failed, 3 on a server error.

  PYTHONPATH=build/python /usr/bin/python3 clients/python/example_pipeline.py \
      --server 127.0.0.1:50051 --checkpoint ../shared/models/stories260K.gguf \
      --text ../shared/data/tinystories-valid-excerpt.txt
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402
from lrkv_client import LrkvClient, pb  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default=os.environ.get("LRKV_SERVER", "127.0.0.1:50051"))
    ap.add_argument("--token-file", default=os.environ.get("LRKV_TOKEN_FILE"))
    ap.add_argument("--tls-ca", default=os.environ.get("LRKV_TLS_CA"))
    ap.add_argument("--checkpoint", required=True, help="a .gguf file or safetensors folder")
    ap.add_argument("--text", required=True, help="server-side text for calibration, "
                    "healing, verification (inside the server's --allow-dir)")
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("--heal-steps", type=int, default=10)
    args = ap.parse_args()
    token = open(args.token_file).read().strip() if args.token_file else None
    client = LrkvClient(args.server, token=token, ca_file=args.tls_ca)
    try:
        ckpt = client.upload(args.checkpoint)
        print(f"uploaded {ckpt.id[:16]}... ({ckpt.format}, {ckpt.layers} layers, "
              f"{ckpt.heads} heads, {ckpt.kv_heads} KV heads)")
        text = os.path.abspath(args.text)
        params = {
            "convert": {"variant": "lrkv", "budget": args.budget, "rope_mode": "plane"},
            "heal": {"data": text, "data_range": "0:0.8", "eval": text, "eval_range": "0.8:1",
                     "steps": args.heal_steps, "batch": 4, "seq_len": 128, "warmup": 2,
                     "eval_every": 0},
            "verify": {"text": text, "prompt_tokens": 16, "decode_tokens": 8,
                       "fidelity_tokens": 1000},
            "bench": {"context": 128, "tokens": 8},
        }
        job = client.submit("pipeline", ckpt.id, json.dumps(params))
        print("pipeline job", job.id)
        job = client.wait(job.id, on_progress=lambda p: print(
            f"  [{p.seq}] {p.stage} {p.step}/{p.total} {p.message}"
            + (f" loss {p.loss:.4f}" if p.HasField("loss") else "")))
        if job.state != pb.SUCCEEDED:
            print(f"job {job.id} ended {pb.JobState.Name(job.state)}: {job.error}",
                  file=sys.stderr)
            return 3
        report = client.report(job.id)
        c = report.conversion
        print(f"conversion: {c.config}, cache {100 * c.cache_ratio_to_source:.1f}% of the "
              f"source, {len(c.layers)} layers")
        for e in report.evaluations:
            print(f"perplexity {e.label}: {e.perplexity:.4f} ({e.tokens} tokens)")
        print(f"loss curve: {len(report.loss_curve)} points")
        for check in report.verification.checks:
            numbers = (f" (error {check.error:.3g}, bound {check.bound:.3g}, "
                       f"ratio {check.ratio:.3g})" if check.bound > 0 else "")
            print(f"check {check.name}: {check.verdict}{numbers}")
        for row in report.latency:
            print(f"decode {row.variant} {row.engine}: {row.tokens_per_second:.1f} tokens/s "
                  f"at context {row.context}")
        print(f"cache rows: {len(report.cache)}")
        print("verification:", "PASS" if report.verification.passed else "FAIL")
        return 0 if report.verification.passed else 1
    except grpc.RpcError as e:
        print(f"lrkv: error: {e.details()} ({e.code().name})", file=sys.stderr)
        return 3
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
