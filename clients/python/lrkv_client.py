"""A Python client for lrkvd, on Debian's python3-grpcio.

The message and stub modules are generated from proto/lrkv/v1/lrkv.proto by the CMake
build (Debian's protoc and grpc_python_plugin) into <build>/python; put that folder on
PYTHONPATH (or pass it as LRKV_PYTHON_GEN). Errors are grpc.RpcError with the server's
code and message.
"""

import hashlib
import os
import sys
import time

_gen = os.environ.get("LRKV_PYTHON_GEN")
if _gen:
    sys.path.insert(0, _gen)

import grpc  # noqa: E402
from lrkv.v1 import lrkv_pb2 as pb  # noqa: E402
from lrkv.v1 import lrkv_pb2_grpc as pb_grpc  # noqa: E402

CHUNK_BYTES = 1 << 20
TERMINAL_STATES = (pb.SUCCEEDED, pb.FAILED, pb.CANCELLED)


class LrkvClient:
    """One channel to lrkvd. `token`: bearer token; `ca_file`: PEM CA to speak TLS."""

    def __init__(self, address, token=None, ca_file=None):
        options = [("grpc.max_send_message_length", 2 << 20)]
        if ca_file:
            with open(ca_file, "rb") as f:
                creds = grpc.ssl_channel_credentials(root_certificates=f.read())
            self._channel = grpc.secure_channel(address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = pb_grpc.LrkvStub(self._channel)
        self._metadata = [("authorization", "Bearer " + token)] if token else []

    def close(self):
        self._channel.close()

    # Checkpoints.
    def register(self, path):
        return self._stub.RegisterCheckpoint(
            pb.RegisterCheckpointRequest(path=os.path.abspath(path)), metadata=self._metadata)

    def upload(self, path, upload_id=None):
        """Uploads a .gguf file (or a folder holding model.safetensors and config.json)
        in 1 MiB chunks, resuming from the server's committed size when an upload with
        the same id was interrupted. Returns the Checkpoint."""
        config = tokenizer = ""
        data_path = path
        if os.path.isdir(path):
            data_path = os.path.join(path, "model.safetensors")
            with open(os.path.join(path, "config.json")) as f:
                config = f.read()
            tok = os.path.join(path, "tokenizer.lrkv.json")
            if os.path.exists(tok):
                with open(tok) as f:
                    tokenizer = f.read()
        with open(data_path, "rb") as f:
            data = f.read()
        sha = hashlib.sha256(data).hexdigest()
        if upload_id is None:
            upload_id = "py-" + hashlib.sha256((sha + config + tokenizer).encode()).hexdigest()[:40]
        start = 0
        try:
            status = self._stub.GetUploadStatus(
                pb.GetUploadStatusRequest(upload_id=upload_id), metadata=self._metadata)
            if status.total_bytes == len(data):
                start = status.committed_bytes
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.NOT_FOUND:
                raise

        def messages():
            yield pb.UploadCheckpointRequest(header=pb.UploadHeader(
                upload_id=upload_id, file_name=os.path.basename(data_path),
                total_bytes=len(data), config_json=config, tokenizer_json=tokenizer))
            for offset in range(start, len(data), CHUNK_BYTES):
                yield pb.UploadCheckpointRequest(chunk=pb.UploadChunk(
                    offset=offset, data=data[offset:offset + CHUNK_BYTES]))
            yield pb.UploadCheckpointRequest(trailer=pb.UploadTrailer(sha256=sha))

        return self._stub.UploadCheckpoint(messages(), metadata=self._metadata)

    # Jobs.
    def submit(self, kind, checkpoint_id, params_json="{}"):
        kind_value = pb.JobKind.Value(kind.upper()) if isinstance(kind, str) else kind
        return self._stub.SubmitJob(pb.SubmitJobRequest(
            kind=kind_value, checkpoint_id=checkpoint_id, params_json=params_json),
            metadata=self._metadata)

    def get(self, job_id):
        return self._stub.GetJob(pb.GetJobRequest(job_id=job_id), metadata=self._metadata)

    def list(self, state=None, kind=None, page_size=100):
        token = ""
        while True:
            resp = self._stub.ListJobs(pb.ListJobsRequest(
                state=state or 0, kind=kind or 0, page_size=page_size, page_token=token),
                metadata=self._metadata)
            yield from resp.jobs
            token = resp.next_page_token
            if not token:
                return

    def watch(self, job_id, after_seq=0):
        """Yields JobProgress events until the job ends."""
        yield from self._stub.WatchJob(pb.WatchJobRequest(job_id=job_id, after_seq=after_seq),
                                       metadata=self._metadata)

    def wait(self, job_id, on_progress=None, poll_seconds=0.2):
        for event in self.watch(job_id):
            if on_progress:
                on_progress(event)
        job = self.get(job_id)
        while job.state not in TERMINAL_STATES:
            time.sleep(poll_seconds)
            job = self.get(job_id)
        return job

    def cancel(self, job_id):
        return self._stub.CancelJob(pb.CancelJobRequest(job_id=job_id), metadata=self._metadata)

    def delete(self, job_id):
        return self._stub.DeleteJob(pb.DeleteJobRequest(job_id=job_id), metadata=self._metadata)

    def report(self, job_id):
        return self._stub.GetReport(pb.GetReportRequest(job_id=job_id), metadata=self._metadata)
