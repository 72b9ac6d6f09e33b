"""adapter: seq2seq-lm: tiny T5, BART and Whisper exported as two files each (the encoder with
the cross-attention cache it makes; the decoder with its caches) and checked over an 8-step
greedy rollout, as examples/seq2seq.yaml does; a fault planted in the decoder's cross-attention
and one in the encoder, each failing with the half and the step named and localized inside
that half; the reference decoding as generate() does; both transformers cache contracts; the
refusals and the spec's checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import EXAMPLES, FIXTURES, by_id
from onnx_parity.errors import LoadError, SpecError
from onnx_parity.spec import parse_spec

# CI runs the tests marked `adapter` against the newest transformers too (.ci/run): the
# example end to end, and those that reach into transformers' model code cheaply.
MODELS = ("tiny-t5", "tiny-bart", "tiny-whisper")


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """examples/seq2seq.yaml, as its header runs it: one run for the module."""
    from onnx_parity.cli.main import main

    report = tmp_path_factory.mktemp("seq2seq") / "report.json"
    code = main(["run", str(EXAMPLES / "seq2seq.yaml"), "--json", str(report)])
    return {"code": code, "report": json.loads(report.read_text())}


@pytest.mark.adapter
def test_the_example_passes_an_8_step_greedy_rollout_for_each_model(
        example: dict[str, Any]) -> None:
    cases = by_id(example["report"])
    assert example["code"] == 0, [c["message"] for c in cases.values()]
    assert sorted(c.split("[")[0] for c in cases) == sorted(MODELS)
    for case in cases.values():
        assert case["status"] == "passed", case["message"]
        assert "within tolerance at all 8 steps" in case["message"], case["message"]
        assert "greedy tokens agree for 8 of 8 steps" in case["notes"]
        assert case["details"]["tokens"]["agreed"] == 8
        assert any(n.startswith("the encoder's output within tolerance") for n in case["notes"])
        assert [o["name"] for o in case["outputs"]] == [
            "logits", *(f"present.{i}.decoder.{p}" for i in (0, 1) for p in ("key", "value"))]


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A T5 whose decoder's cross-attention is off in the export from step FAULT_FROM, and a
    BART whose encoder is off in the export, in one run, localized as a failure is by default;
    one worker, so that transformers is imported once."""
    from onnx_parity.cli.main import main

    folder = tmp_path_factory.mktemp("faulty")
    shutil.copy(FIXTURES / "seq2seq.py", folder / "seq2seq.py")
    models = "".join(f"""
  - name: {name}
    torch: seq2seq.py:make_{name.replace("-", "_")}_fault
    adapter: seq2seq-lm
    exporter: torchscript
    datasets: [text]
    rollout: {{steps: 8}}
    inputs:
      input_ids: {{shape: [batch, seq], dtype: int64, high: 64}}
""" for name in ("t5-cross", "bart-encoder"))
    spec = folder / "parity.yaml"
    spec.write_text("version: 1\ndatasets:\n  text: {kind: random, samples: 1, batch_sizes: "
                    f"[1], dims: {{seq: 5}}}}\nmodels:{models}")
    report = folder / "report.json"
    code = main(["run", str(spec), "--json", str(report), "--jobs", "1"])
    return {"code": code, "report": json.loads(report.read_text())}


def test_a_fault_in_the_decoders_cross_attention_names_the_decoder_and_the_step(
        faulty: dict[str, Any]) -> None:
    from fixtures.seq2seq import FAULT_FROM

    case = by_id(faulty["report"])["t5-cross[opset18-cpu-text-b1]"]
    assert faulty["code"] == 1 and case["status"] == "failed", case["message"]
    assert case["message"].startswith(
        f"the decoder drifted at step {FAULT_FROM} of 8 (the encoder's output within "
        f"tolerance; the decoder fed each side's own cross-attention cache); step {FAULT_FROM}"
        " of 8: logits:"), case["message"]
    assert case["details"]["rollout"]["first_failing"] == FAULT_FROM
    assert any(n.startswith("the encoder's output within tolerance") for n in case["notes"])
    drift = case["details"]["divergence"]  # localized inside the decoder's file
    assert drift["module"] == "lm.decoder.block.1.layer.1", drift
    assert drift["module_type"] == "T5LayerCrossAttention"


def test_a_fault_in_the_encoder_names_the_encoder(faulty: dict[str, Any]) -> None:
    case = by_id(faulty["report"])["bart-encoder[opset18-cpu-text-b1]"]
    assert case["status"] == "failed", case["message"]
    assert case["message"].startswith(
        "the encoder drifted: its output (last_hidden_state) is out of tolerance before any "
        "decoder step, so the decoder was not rolled out on it"), case["message"]
    assert [o["name"] for o in case["outputs"]][:1] == ["last_hidden_state"]
    assert "tokens" not in (case["details"] or {}) or not case["details"].get("tokens")
    drift = case["details"]["divergence"]  # localized inside the encoder's file
    assert drift["node"].startswith("/encoder/layers.1/"), drift
    assert (drift["module"], drift["module_type"]) == ("encoder.layers.1", "BartEncoderLayer")
    # The cause ladder ran on the encoder's file too (on a GPU, TF32 off is tried there): graph
    # optimizations off change nothing, the fault is in the export.
    assert "cause" not in case["details"] or not case["details"]["cause"]
    ruled_out = case["details"]["causes_ruled_out"]
    assert [c["kind"] for c in ruled_out] == ["graph"], ruled_out


def test_the_spec_says_what_the_adapter_needs(tmp_path: Path) -> None:
    text = """version: 1
models:
  - name: speech
    torch: models.py:make
    onnx: speech.onnx
    adapter: seq2seq-lm
    rollout: {steps: 4, left_padding: [1]}
    inputs:
      input_features: {shape: [batch, 80]}
      attention_mask: {shape: [batch, seq], dtype: int64, high: 2}
"""
    (tmp_path / "speech.onnx").write_bytes(b"")
    (tmp_path / "models.py").write_text("")
    with pytest.raises(SpecError) as raised:
        parse_spec(text, tmp_path / "parity.yaml")
    said = str(raised.value)
    for line, message in ((5, "exports the encoder and the decoder itself, as two files"),
                          (7, "rollout.left_padding pads the prompts of adapter: causal-lm, "
                              "and this model has another one: leave it out"),
                          (9, "input_features under adapter: seq2seq-lm are a spectrogram, "
                              "[batch, mel bins, frames]"),
                          (10, "takes one input, input_features (speech) or input_ids")):
        assert f"parity.yaml:{line}:" in said and message in said, said


@pytest.mark.adapter
def test_what_the_adapter_cannot_run_is_refused_with_what_to_do(tmp_path: Path) -> None:
    import dataclasses

    from fixtures.decoders import make_gpt2
    from onnx_parity.backends.pytorch import LoadedModule
    from onnx_parity.prepare.inputs import Sample
    from onnx_parity.run.adapters.seq2seq import Seq2SeqLM, _within_limits
    from onnx_parity.run.adapters.two_halves import layout_of_model

    with pytest.raises(LoadError, match=r"not an encoder-decoder model.*use adapter: causal-lm"):
        layout_of_model(make_gpt2())
    from fixtures.seq2seq import make_t5

    t5 = make_t5()
    t5.generation_config.decoder_start_token_id = None
    t5.config.decoder_start_token_id = None
    with pytest.raises(LoadError, match=r"no decoder_start_token_id.*set generation_config"):
        layout_of_model(t5)
    (tmp_path / "m.py").write_text("")
    model = parse_spec("""version: 1
models:
  - name: t5
    torch: m.py:make
    adapter: seq2seq-lm
    forward_args: {use_cache: false}
    inputs:
      input_ids: {shape: [batch, 5], dtype: int64, high: 64}
""", tmp_path / "parity.yaml").models[0]
    loaded = LoadedModule(make_t5(), ())
    with pytest.raises(LoadError, match="leave forward_args out"):
        Seq2SeqLM().wrap(loaded, model)
    halves = Seq2SeqLM().wrap(loaded, dataclasses.replace(model, forward_args={}))
    with pytest.raises(LoadError, match=r"input_ids hold token 64.*high: 64"):
        _within_limits(halves, halves.module.layout,
                       [Sample({"input_ids": np.full((1, 3), 64)})])


@pytest.mark.adapter
def test_both_cache_contracts_give_the_same_halves() -> None:
    """transformers 5.24 renamed forward()'s `past_key_values` to `cache`: the halves hand the
    EncoderDecoderCache over by the name forward() takes, and give the same outputs."""
    import torch

    from fixtures.seq2seq import make_t5, make_t5_taking
    from onnx_parity.run.adapters.two_halves import (
        decoder_example,
        decoder_module,
        encoder_example,
        encoder_module,
        layout_of_model,
    )

    torch.manual_seed(0)
    layout = layout_of_model(make_t5())
    want = None
    for keyword in ("cache", "past_key_values"):
        torch.manual_seed(0)
        lm = make_t5_taking(keyword)
        own = layout_of_model(lm)
        assert own == dataclasses_replace(layout, keyword=keyword)
        with torch.no_grad():
            got = [*encoder_module(lm, own)(*encoder_example(own, 2, 64)),
                   *decoder_module(lm, own)(*decoder_example(own, 2, 64))]
        want = want or got
        assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))


def dataclasses_replace(value: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(value, **changes)


@pytest.mark.adapter
@pytest.mark.parametrize("name", ["t5", "bart", "whisper"])
def test_the_reference_decodes_as_generate_does(name: str) -> None:
    """The halves' greedy rollout in PyTorch gives generate()'s raw logits at every step, and
    its tokens (no logits processor changes a token of these tiny models' greedy path)."""
    import sys

    import torch

    from onnx_parity.backends import torch_outputs
    from onnx_parity.run.adapters.greedy import LOGITS
    from onnx_parity.run.adapters.seq2seq import Seq2SeqDecode
    from onnx_parity.run.adapters.two_halves import (
        decoder_module,
        encoder_feed,
        encoder_module,
        layout_of_model,
    )

    sys.path.insert(0, str(EXAMPLES))
    try:
        import seq2seq as makers  # examples/seq2seq.py
    finally:
        sys.path.remove(str(EXAMPLES))
    torch.manual_seed(0)
    lm = getattr(makers, f"make_tiny_{name}")()
    layout = layout_of_model(lm)
    rng = np.random.default_rng(0)
    sample = ({"input_features": rng.standard_normal((1, *layout.features), np.float32)}
              if layout.speech else {"input_ids": rng.integers(3, 64, (1, 5))})
    feed = encoder_feed(layout, sample)
    encoded = torch_outputs(encoder_module(lm, layout), feed)
    decode, decoder = Seq2SeqDecode(layout, 8), decoder_module(lm, layout)
    step_feed = decode.first_feed(feed, dict(zip(layout.encoder_outputs, encoded, strict=True)))
    logits = []
    for step in range(8):
        outputs = dict(zip(layout.outputs, torch_outputs(decoder, step_feed), strict=True))
        logits.append(outputs[LOGITS][:, -1])
        step_feed = decode.next_feed(step, step_feed, outputs)
    with torch.no_grad():
        served = lm.generate(**{k: torch.from_numpy(v) for k, v in sample.items()},
                             max_new_tokens=8, do_sample=False, num_beams=1,
                             output_logits=True, return_dict_in_generate=True)
    assert len(served.logits) >= 1
    steps = len(served.logits)
    assert max(abs(a - b.numpy()).max() for a, b in
               zip(logits[:steps], served.logits, strict=True)) < 1e-5
    chosen = [int(step.argmax(-1)[0]) for step in logits[:steps]]
    assert served.sequences[0, 1:steps + 1].tolist() == chosen
