"""The engine's LoRA equals PEFT's, per projection, per logit and per greedy token."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from engine.lora.manager import LoraManager
from engine.lora.ops import lora_delta
from engine.lora.shapes import SUPPORTED_MODULES
from engine.tooling.random_lora import make_random_adapter
from tests.engine.lora.hf_lora import LoraPatchedModel

# peft is imported in the tests that use it: at collection, its import (torch.distributed,
# dynamo, sympy: about 4 s of CPU) was paid by every test process.


def _base_model(base_path):
    return AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32).eval()


PEFT_CONFIGS = {
    "all-modules": dict(r=8, lora_alpha=32, target_modules=list(SUPPORTED_MODULES)),
    "rslora": dict(r=16, lora_alpha=8, use_rslora=True, target_modules=["o_proj", "down_proj"]),
    "one-layer": dict(
        r=4, lora_alpha=4, target_modules=["k_proj", "up_proj"], layers_to_transform=[1]
    ),
}


@pytest.mark.parametrize("variant", list(PEFT_CONFIGS))
def test_each_projection_matches_peft(variant, base_path, base_shape, tmp_path):
    """PEFT's own random init (A and B), saved by PEFT, applied by the engine's slots."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    config = LoraConfig(init_lora_weights=False, lora_dropout=0.0, **PEFT_CONFIGS[variant])
    peft_model = get_peft_model(_base_model(base_path), config).eval()
    peft_model.save_pretrained(tmp_path)
    manager = LoraManager(base_shape, max_loras=2, max_lora_rank=16)
    identity = manager.add_adapter("peft", tmp_path)
    manager.hold(identity)
    slots = manager.prepare_batch([identity], [5]).token_slots
    sizes = {m: base_shape.in_out(m)[0] for m in SUPPORTED_MODULES}
    checked = 0
    for name, module in peft_model.named_modules():
        if not hasattr(module, "lora_A"):
            continue
        layer, proj = int(name.split(".layers.")[1].split(".")[0]), name.rsplit(".", 1)[1]
        inputs = torch.randn(5, sizes[proj])
        with torch.no_grad():
            expected = module(inputs)
            base = module.base_layer(inputs)
            ours = base + lora_delta(
                inputs,
                slots,
                manager.slots.lora_a[proj][layer],
                manager.slots.lora_b[proj][layer],
                manager.slots.scalings,
            )
        torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)
        if proj in config.target_modules and (
            not config.layers_to_transform or layer in config.layers_to_transform
        ):
            assert not torch.allclose(base, expected, atol=1e-3), "adapter should change output"
            checked += 1
    layers = config.layers_to_transform or range(base_shape.num_hidden_layers)
    assert checked == len(config.target_modules) * len(layers)


def test_mixed_batch_of_three_adapters_and_base_matches_peft_alone(base_path, base_shape, tmp_path):
    from peft import PeftModel

    adapters = {
        f"a{i}": make_random_adapter(
            base_path, tmp_path / f"a{i}", rank=rank, targets=targets, seed=i
        )
        for i, (rank, targets) in enumerate(
            [(8, SUPPORTED_MODULES), (4, ("q_proj", "v_proj")), (16, ("gate_proj", "down_proj"))]
        )
    }
    manager = LoraManager(base_shape, max_loras=4, max_lora_rank=16)
    identities = {name: manager.add_adapter(name, path) for name, path in adapters.items()}
    for identity in identities.values():
        manager.hold(identity)
    patched = LoraPatchedModel(_base_model(base_path), manager)
    input_ids = torch.randint(3, 1000, (4, 12), generator=torch.Generator().manual_seed(0))
    order = [identities["a0"], None, identities["a2"], identities["a1"]]
    mixed = patched.logits(input_ids, order)

    for row, (identity, name) in enumerate(zip(order, ["a0", None, "a2", "a1"], strict=True)):
        if name is None:
            reference = _base_model(base_path)
        else:
            reference = PeftModel.from_pretrained(_base_model(base_path), adapters[name]).eval()
        with torch.no_grad():
            expected = reference(input_ids=input_ids[row : row + 1]).logits[0]
        torch.testing.assert_close(mixed[row], expected, rtol=1e-4, atol=1e-4)
        alone = patched.logits(input_ids[row : row + 1], [identity])[0]
        torch.testing.assert_close(mixed[row], alone, rtol=1e-5, atol=1e-5)


def test_greedy_tokens_match_peft_and_zero_b_matches_base(base_path, base_shape, tmp_path):
    from peft import PeftModel

    adapter_path = make_random_adapter(base_path, tmp_path / "rand", rank=8, seed=3, b_std=0.2)
    zero_path = make_random_adapter(base_path, tmp_path / "zero", rank=8, seed=3, zero_b=True)
    manager = LoraManager(base_shape, max_loras=2, max_lora_rank=8)
    rand_id = manager.add_adapter("rand", adapter_path)
    zero_id = manager.add_adapter("zero", zero_path)
    manager.hold(rand_id)
    manager.hold(zero_id)
    patched = LoraPatchedModel(_base_model(base_path), manager)
    prompt = torch.tensor([[5, 17, 99, 230, 41, 7, 300, 12]])

    peft_model = PeftModel.from_pretrained(_base_model(base_path), adapter_path).eval()
    with torch.no_grad():
        peft_tokens = peft_model.generate(
            input_ids=prompt, max_new_tokens=16, min_new_tokens=16, do_sample=False
        )[0, prompt.shape[1] :].tolist()
        base_tokens = (
            _base_model(base_path)
            .generate(prompt, max_new_tokens=16, min_new_tokens=16, do_sample=False)[
                0, prompt.shape[1] :
            ]
            .tolist()
        )
    ours = patched.greedy(prompt, rand_id, 16)
    assert ours == peft_tokens
    assert ours != base_tokens, "a random adapter should change greedy output"
    assert patched.greedy(prompt, zero_id, 16) == base_tokens
    assert patched.greedy(prompt, None, 16) == base_tokens
