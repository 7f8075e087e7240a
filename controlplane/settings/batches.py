"""Files and the Batch API: where files are stored, how big they may be, how batches run.

Files go through Django's storage API, storage alias ``batch_files``: a local folder under the
var dir by default, an S3-compatible bucket with ``FILES_STORAGE=s3`` (django-storages and
boto3 must then be installed: ``pip install 'llm-platform[s3]'``; docs/batches.md).
"""

from controlplane.settings.core import VAR_DIR
from controlplane.settings.env import env

FILES_STORAGE = env.str("FILES_STORAGE", "local")  # "local" or "s3"


def _files_storage() -> dict:
    if FILES_STORAGE == "s3":
        # Credentials come from the usual AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY variables.
        options = {
            "bucket_name": env.str("FILES_S3_BUCKET", ""),
            "endpoint_url": env.str("FILES_S3_ENDPOINT_URL", "") or None,
            "region_name": env.str("FILES_S3_REGION", "") or None,
            "location": env.str("FILES_S3_PREFIX", "files"),
            "file_overwrite": False,
            "default_acl": None,
        }
        return {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": options}
    location = env.str("FILES_DIR", str(VAR_DIR / "files"))
    return {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": location, "file_permissions_mode": 0o600},
    }


STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "batch_files": _files_storage(),
}

# The largest file POST /v1/files takes (OpenAI's limit for batch input: 200 MB). The upload
# streams to a temporary file, never into memory (inference/body_limit.py lets it through).
FILES_MAX_UPLOAD_BYTES = env.int("FILES_MAX_UPLOAD_BYTES", 200 * 1024 * 1024)
# Lines one batch may hold (OpenAI: 50,000).
BATCH_MAX_LINES = env.int("BATCH_MAX_LINES", 50_000)
# Lines of one batch worker in flight at once: enough to fill an engine's batch, so a batch
# alone runs at the engine's full speed. Interactive latency is the engines' fair policy's
# to keep (batch class after interactive, and few batch lines per step while interactive
# requests arrive): 256 in flight left interactive TTFT p50 at 1.05x idle on a 2-core host,
# with the batch twice as fast as with 4 (bench/batch_interference.py, docs/benchmarks.md).
# The sum over batch workers should stay under ENGINE_MAX_WAITING, past which requests get 503.
BATCH_MAX_IN_FLIGHT = env.int("BATCH_MAX_IN_FLIGHT", 256)
# The nice value a worker that runs only batches takes, itself and its autogroup
# (inference/batches/worker_priority.py): live traffic on the same host gets the CPU first.
# 0 leaves the worker's priority alone.
BATCH_WORKER_NICE = env.int("BATCH_WORKER_NICE", 10)
# The engine priority of batch lines (lower runs first; interactive requests send 0), which
# engines started with --scheduling-policy priority honour.
BATCH_ENGINE_PRIORITY = env.int("BATCH_ENGINE_PRIORITY", 100)
# A running batch's lease: the worker renews it every second; beat re-queues a batch whose
# lease ran out (the worker died) every BATCH_REQUEUE_INTERVAL seconds.
BATCH_LEASE_SECONDS = env.float("BATCH_LEASE_SECONDS", 30.0)
BATCH_REQUEUE_INTERVAL = env.float("BATCH_REQUEUE_INTERVAL", 10.0)
# Batch tasks run on their own queue, served by a worker of their own (manage.py serve starts
# it), so a long batch never delays the usage flush or the adapter tasks.
CELERY_TASK_ROUTES = {"batches.run": {"queue": "batches"}}
