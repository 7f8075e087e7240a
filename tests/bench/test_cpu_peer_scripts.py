"""The CPU comparison scripts' own logic (bench/cpu_vs_vllm.py, cpu_vs_llamacpp.py, peers.py):
the workload the issue specifies, the mode names, and the record each run leaves."""

from __future__ import annotations

import os

from bench import cpu_vs_llamacpp, cpu_vs_vllm, peers


def test_offline_workload_is_the_issues():
    workload = cpu_vs_vllm.make_workload(64)
    prompts, outputs = workload["prompts"], workload["output_lens"]
    assert len(prompts) == len(outputs) == 64
    assert all(16 <= len(p) <= 256 for p in prompts)
    assert all(16 <= n <= 128 for n in outputs)
    # vLLM refuses prompt ids outside the tokenizer's vocabulary (the demo one has 1,024).
    assert all(0 <= t < 1024 for p in prompts for t in p)
    assert cpu_vs_vllm.make_workload(64) == workload  # both sides get the same prompts
    assert cpu_vs_vllm.make_workload(32) != cpu_vs_vllm.make_workload(32, seed=1)


def test_mode_names_map_to_engine_options():
    modes = cpu_vs_llamacpp._modes("fp32,bf16,int8,bf16+int4")
    assert modes == {
        "fp32": {"dtype": "float32"},
        "bf16": {"dtype": "bfloat16"},
        "int8": {"dtype": "float32", "quantization": "int8"},
        "bf16+int4": {"dtype": "bfloat16", "quantization": "int4"},
    }


def test_each_run_is_recorded_with_machine_and_load(tmp_path, monkeypatch):
    target = tmp_path / "benchmarks.md"
    target.write_text("# Benchmarks\n")
    monkeypatch.setattr(peers, "BENCHMARKS_MD", target)
    monkeypatch.delenv("BENCH_NO_RECORD", raising=False)
    machine = peers.machine_line()
    assert f"{os.cpu_count()} CPUs" in machine and "load average" in machine
    peers.record("A run", "python bench/x.py", machine, ["| a | b |", "|---|---|"])
    text = target.read_text()
    assert text.startswith("# Benchmarks\n")
    assert "### A run" in text and "`python bench/x.py`" in text and machine in text
    monkeypatch.setenv("BENCH_NO_RECORD", "1")
    peers.record("Trial", "python bench/x.py", machine, [])
    assert "Trial" not in target.read_text()


def test_median_and_peak_rss():
    assert peers.median([3.0, 1.0, 2.0]) == 2.0
    assert peers.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    own = peers.peak_rss_mib(os.getpid())
    assert own is not None and own > 10
    assert cpu_vs_vllm.process_tree_peak_rss(os.getpid()) >= own
