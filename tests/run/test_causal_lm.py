"""adapter: causal-lm: tiny GPT-2 and Llama (grouped-query attention) decoders exported with
their cache as flat tensors and checked over a 16-step greedy rollout, on both exporters;
Mistral and Gemma2 with a sliding window shorter than the prompt and its rollout, checked the
same way, the adapter's reference decoding as generate() does with its windowed cache; a
shipped decoder with one attention weight nudged fails at a step, with its first diverging
token; the token judge's near ties and drift; the refusals and the spec's checks."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import EXAMPLES, FIXTURES, by_id
from onnx_parity.compare.tokens import judge_tokens, tokens_sentence
from onnx_parity.errors import LoadError, SpecError
from onnx_parity.findings import CaseDetails
from onnx_parity.report.jsonvalues import Reader
from onnx_parity.report.records import details_dict, read_details
from onnx_parity.results import Tolerance
from onnx_parity.spec import parse_spec

FIXTURE = FIXTURES / "decoders.py"
PROMPT = "input_ids: {shape: [batch, seq], dtype: int64, high: 64}"
# CI runs the tests marked `adapter` against the newest transformers too (.ci/run): those that
# reach into transformers' own model code cheaply; the end-to-end runs stay on the pinned one.
DATASET = "prompts: {kind: random, samples: 1, batch_sizes: [1], dims: {seq: 5}}"


@pytest.fixture(scope="module")
def passing(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """GPT-2 and Llama, each on both exporters, 16 greedy steps, one prompt (b1) and two of
    unequal lengths (b2: the second left-padded by 2, masked out): one run for the module."""
    from onnx_parity.cli.main import main

    folder = tmp_path_factory.mktemp("decoders")
    shutil.copy(FIXTURE, folder / "decoders.py")
    models = "".join(f"""
  - name: {name}
    torch: decoders.py:make_{name}
    adapter: causal-lm
    exporters: [torchscript, dynamo]
    datasets: [prompts]
    rollout: {{steps: 16, left_padding: [0, 2]}}
    inputs:
      {PROMPT}
""" for name in ("gpt2", "llama"))
    spec = folder / "parity.yaml"
    spec.write_text(f"version: 1\ndatasets:\n  {DATASET.replace('[1]', '[1, 2]')}\n"
                    f"models:{models}")
    report = folder / "report.json"
    code = main(["run", str(spec), "--json", str(report)])
    import json

    return {"code": code, "report": json.loads(report.read_text())}


def test_gpt2_and_llama_pass_16_greedy_steps_on_both_exporters(passing: dict[str, Any]) -> None:
    cases = by_id(passing["report"])
    assert passing["code"] == 0, [c["message"] for c in cases.values()]
    assert sorted(cases) == [f"{m}[opset18-{e}-cpu-prompts-b{b}]" for m in ("gpt2", "llama")
                             for e in ("dynamo", "torchscript") for b in (1, 2)]
    for id, case in cases.items():
        assert case["status"] == "passed", case["message"]
        assert "at all 16 steps" in case["message"]
        padded = "prompts left-padded by 0, 2 tokens, row by row; real positions compared"
        unpadded = "padding not checked: the batch's prompts are of equal lengths"
        assert any(n.startswith(padded if id.endswith("b2]") else unpadded)
                   for n in case["notes"]), case["notes"]
        assert "greedy tokens agree for 16 of 16 steps" in case["notes"]
        assert case["details"]["tokens"]["agreed"] == 16
        assert [o["name"] for o in case["outputs"]] == [
            "logits", "present.0.key", "present.0.value", "present.1.key", "present.1.value"]


@pytest.fixture(scope="module")
def sliding(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Mistral on both exporters and Gemma2 on TorchScript (each exporter meets a sliding
    window; a third dynamo export of a decoder would cost CI more than it checks), a window of 4
    tokens, a prompt of 5 and 8 greedy steps: one run for the module."""
    from onnx_parity.cli.main import main

    folder = tmp_path_factory.mktemp("sliding")
    shutil.copy(FIXTURE, folder / "decoders.py")
    models = "".join(f"""
  - name: {name}
    torch: decoders.py:make_{name}
    adapter: causal-lm
    exporters: [{exporters}]
    datasets: [prompts]
    rollout: {{steps: 8}}
    inputs:
      {PROMPT}
""" for name, exporters in (("mistral", "torchscript, dynamo"), ("gemma2", "torchscript")))
    spec = folder / "parity.yaml"
    spec.write_text(f"version: 1\ndatasets:\n  {DATASET}\nmodels:{models}")
    report = folder / "report.json"
    code = main(["run", str(spec), "--json", str(report)])
    import json

    return {"code": code, "report": json.loads(report.read_text())}


def test_sliding_window_decoders_pass_on_both_exporters(sliding: dict[str, Any]) -> None:
    cases = by_id(sliding["report"])
    assert sliding["code"] == 0, [c["message"] for c in cases.values()]
    assert sorted(cases) == ["gemma2[opset18-cpu-prompts-b1]",
                             "mistral[opset18-dynamo-cpu-prompts-b1]",
                             "mistral[opset18-torchscript-cpu-prompts-b1]"]
    for case in cases.values():
        assert case["status"] == "passed", case["message"]
        assert "at all 8 steps" in case["message"]
        assert "greedy tokens agree for 8 of 8 steps" in case["notes"]


@pytest.mark.adapter
@pytest.mark.parametrize("name", ["mistral", "gemma2"])
def test_the_reference_decodes_as_generate_does_with_its_sliding_window_cache(name: str) -> None:
    """generate() keeps only the window in its cache (Gemma2: in every other layer); the
    adapter hands the model an empty DynamicCache, which keeps every past token, and the model
    applies its window in the attention mask: the same tokens, the same logits to float
    rounding, and the window matters (the same weights without it decode otherwise)."""
    import torch

    from fixtures import decoders
    from onnx_parity.run.adapters.causal_lm import GreedyDecode
    from onnx_parity.run.adapters.flat_cache import (
        cache_layout,
        flat_cache_module,
        present_names,
        returned_cache,
    )
    from onnx_parity.run.adapters.greedy import LOGITS

    torch.manual_seed(0)
    lm = getattr(decoders, f"make_{name}")()
    prompt = torch.randint(0, decoders.VOCAB, (2, 5))
    steps = 8

    def generate() -> Any:
        with torch.no_grad():
            return lm.generate(prompt, attention_mask=torch.ones_like(prompt),
                               max_new_tokens=steps, do_sample=False, pad_token_id=0,
                               output_logits=True, return_dict_in_generate=True)

    served = generate()
    assert "DynamicSlidingWindowLayer" in {type(layer).__name__
                                           for layer in returned_cache(served).layers}
    layout = cache_layout(lm)
    module, decode = flat_cache_module(lm, layout.layers), GreedyDecode(layout, steps)
    feed = decode.first_feed({"input_ids": prompt.numpy()})
    logits, tokens = [], []
    for step in range(1, steps + 1):
        with torch.no_grad():
            out = module(*(torch.from_numpy(feed[i.name]) for i in layout.inputs))
        outputs = dict(zip(layout.outputs, (t.numpy() for t in out), strict=True))
        logits.append(outputs[LOGITS][:, -1])
        tokens.append(outputs[LOGITS][:, -1].argmax(-1))
        if step < steps:
            feed = decode.next_feed(step, feed, outputs)
    assert outputs[present_names(layout.layers)[0]].shape[2] == 5 + steps - 1  # every token
    assert np.array_equal(np.stack(tokens, 1), served.sequences[:, 5:].numpy())
    assert max(abs(a - b.numpy()).max() for a, b in zip(logits, served.logits, strict=True)) < 1e-5
    lm.config.sliding_window = 64
    unwindowed = generate()
    assert max((a - b).abs().max() for a, b in
               zip(served.logits, unwindowed.logits, strict=True)) > 0.1


def test_a_nudged_attention_weight_fails_with_the_step_and_token(
        tmp_path: Path, write_spec: Any, run_cli: Any) -> None:
    import onnx
    import torch
    from onnx import numpy_helper

    from onnx_parity.prepare.export import export_model
    from onnx_parity.run.adapters.flat_cache import cache_layout, export_example, flat_cache_module

    shutil.copy(FIXTURE, tmp_path / "decoders.py")
    torch.manual_seed(0)  # as the reference's factory call is seeded
    from fixtures.decoders import make_gpt2

    lm = make_gpt2()
    layout = cache_layout(lm)
    path = tmp_path / "gpt2.onnx"
    export_model(flat_cache_module(lm, layout.layers), export_example(layout, 64, 2),
                 layout.inputs, layout.outputs, 18, "torchscript", path)
    model = onnx.load(str(path))
    weight = next(w for w in model.graph.initializer
                  if w.name == "lm.transformer.h.1.attn.c_proj.weight")
    nudged = numpy_helper.to_array(weight).copy()
    nudged[:, :4] += 0.5
    weight.CopyFrom(numpy_helper.from_array(nudged, weight.name))
    onnx.save(model, str(path))
    spec = write_spec(f"""
        version: 1
        datasets:
          {DATASET}
        models:
          - name: shipped
            torch: decoders.py:make_gpt2
            onnx: gpt2.onnx
            adapter: causal-lm
            datasets: [prompts]
            inputs:
              {PROMPT}
        """)
    code, _, _, report = run_cli(spec, "--localize", "never", "--causes", "never")
    case = report["cases"][0]
    tokens = case["details"]["tokens"]
    assert code == 1 and case["status"] == "failed", case["message"]
    assert tokens["step"] is not None and not tokens["near_tie"], tokens
    assert case["message"].startswith(
        f"tokens diverge at step {tokens['step']} of 16: {tokens['expected']} vs "
        f"{tokens['actual']}"), case["message"]
    assert "drift" in case["message"]
    # the job summary's cell leads with the tokens too, and names the step
    from onnx_parity.report.jsonfile import from_dict
    from onnx_parity.report.summary import summary_markdown

    cell = f"tokens diverge at step {tokens['step']} of 16: {tokens['expected']} vs "
    assert cell in summary_markdown(from_dict(report)), cell


def _logits(*rows: list[float]) -> np.ndarray:
    return np.asarray([[row] for row in rows], dtype=np.float32)  # [batch, seq 1, vocab]


def test_a_near_tie_is_not_drift_and_a_wide_gap_is() -> None:
    tolerance = Tolerance(atol=1e-4, rtol=0.0)
    same = _logits([0.0, 1.0, 0.5])
    tie_ref, tie_ort = _logits([0.0, 1.0, 0.99995]), _logits([0.0, 0.99995, 1.0])
    found = judge_tokens([[same, tie_ref, same]], [[same, tie_ort, same]], tolerance)
    assert (found.step, found.expected, found.actual, found.near_tie) == (2, 1, 2, True)
    assert (found.comparable, found.agreed, found.diverged, found.failed) == (3, 2, 1, False)
    assert "a near tie, not drift; ONNX Runtime was fed PyTorch's token" in tokens_sentence(found)
    wide = _logits([0.0, 0.2, 1.0])
    found = judge_tokens([[same, same, same]], [[same, same, wide]], tolerance)
    assert (found.step, found.agreed, found.failed) == (3, 2, True)
    assert tokens_sentence(found).startswith("tokens diverge at step 3 of 3: 1 vs 2")
    # after a near tie, every step is still judged (both sides decode the same text): drift
    # at a later step fails there, whichever came first
    found = judge_tokens([[same, tie_ref, same]], [[same, tie_ort, wide]], tolerance)
    assert (found.step, found.failed, found.diverged, found.agreed) == (3, True, 2, 1)
    agree = judge_tokens([[same] * 4], [[same] * 4], tolerance)
    assert tokens_sentence(agree) == "greedy tokens agree for 4 of 4 steps"
    back = read_details(Reader(details_dict(CaseDetails(tokens=found)), "details"))
    assert back.tokens == found


@pytest.mark.adapter
def test_an_encoder_decoder_and_a_state_space_model_are_refused_with_what_to_do() -> None:
    from fixtures.decoders import make_mamba, make_t5
    from onnx_parity.run.adapters.flat_cache import cache_layout

    with pytest.raises(LoadError, match="encoder-decoder model; adapter: causal-lm takes "
                                        "decoder-only models"):
        cache_layout(make_t5())
    # before transformers 5.24 by its signature, from 5.24 on by what it does with the cache
    with pytest.raises(LoadError, match=r"^MambaForCausalLM(\.forward\(\) takes no past_key_values"
                                        r" or cache| raised \w+ \(.*\) when given a DynamicCache)"
                                        r".*leave the adapter out"):
        cache_layout(make_mamba())


def test_the_spec_says_what_the_adapter_needs(tmp_path: Path) -> None:
    text = f"""version: 1
models:
  - name: lm
    onnx: lm.onnx
    adapter: causal-lm
    outputs: [logits]
    precisions: [fp32, fp16]
    rollout: {{steps: 4, feedback: {{logits: input_ids}}}}
    inputs:
      {PROMPT}
      attention_mask: {{shape: [batch, seq], dtype: int64, high: 2}}
"""
    (tmp_path / "lm.onnx").write_bytes(b"")
    with pytest.raises(SpecError) as raised:
        parse_spec(text, tmp_path / "parity.yaml")
    said = str(raised.value)
    for line, message in ((5, "adapter: causal-lm runs the PyTorch model step by step"),
                          (6, "the outputs are named by the adapter"),
                          (7, "fp16 cannot be checked over a rollout yet"),
                          (8, "feeds each step's token and cache back itself"),
                          (11, "feeds attention_mask itself")):
        assert f"parity.yaml:{line}:" in said and message in said, said


@pytest.mark.adapter
def test_the_decoder_example_passes_as_the_readme_says(run_cli: Any) -> None:
    """examples/decoder.yaml, as the README runs it: a tiny Llama, 16 greedy tokens per prompt,
    every step's logits and cache compared, and the tokens agreeing."""
    example = EXAMPLES / "decoder.yaml"
    code, out, _, report = run_cli(example)
    assert code == 0, out
    assert {c["status"] for c in report["cases"]} == {"passed"}
    for case in report["cases"]:
        assert "greedy tokens agree for 16 of 16 steps" in case["notes"]
        assert case["details"]["tokens"]["agreed"] == 16


@pytest.mark.adapter
def test_both_cache_contracts_are_read_from_the_signature() -> None:
    """transformers 5.24 renamed forward()'s `past_key_values` to `cache` (and the output's
    field with it): the adapter hands the cache over by the name forward() takes, and a model
    of either contract gives the same flat outputs, whichever transformers is installed."""
    import torch
    import transformers
    from packaging.version import Version

    from fixtures.decoders import make_llama, make_llama_taking
    from onnx_parity.run.adapters.flat_cache import (
        cache_keyword,
        cache_layout,
        export_example,
        flat_cache_module,
    )

    newest = Version(transformers.__version__) >= Version("5.24.0")
    assert cache_keyword(make_llama()) == ("cache" if newest else "past_key_values")
    torch.manual_seed(0)
    plain = make_llama()
    layout = cache_layout(plain)
    example = export_example(layout, 64, 2)
    with torch.no_grad():
        want = flat_cache_module(plain, layout.layers)(*example)
    for keyword in ("cache", "past_key_values"):
        torch.manual_seed(0)
        lm = make_llama_taking(keyword)
        assert cache_keyword(lm) == keyword
        assert cache_layout(lm) == dataclasses.replace(layout, keyword=keyword)
        with torch.no_grad():
            got = flat_cache_module(lm, layout.layers)(*example)
        assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Shipped exports with planted faults, in one run: a decoder whose two top logits tie
    exactly at every step, exported so that it breaks the tie the other way at step 2 (a near
    tie), alone over 4 steps and with a bug planted at step 5 of 6; and a decoder exported
    without its attention mask, on one prompt and on two of unequal lengths."""
    import json

    import torch

    from fixtures.decoders import make_maskless, make_planted
    from onnx_parity.cli.main import main
    from onnx_parity.prepare.export import export_model
    from onnx_parity.run.adapters.flat_cache import cache_layout, export_example, flat_cache_module

    folder = tmp_path_factory.mktemp("planted")
    shutil.copy(FIXTURE, folder / "decoders.py")
    for name, make in (("tied", lambda: make_planted(prompt=5, tie_at=2, bug_at=5)),
                       ("maskless", make_maskless)):
        torch.manual_seed(0)  # as the reference's factory call is seeded
        lm = make()
        layout = cache_layout(lm)
        export_model(flat_cache_module(lm, layout.layers), export_example(layout, 64, 2),
                     layout.inputs, layout.outputs, 18, "torchscript", folder / f"{name}.onnx")
    models = "".join(f"""
  - name: {name}
    torch: decoders.py:{factory}
    onnx: {onnx}.onnx
    adapter: causal-lm
    datasets: [{data}]
    rollout: {{steps: {steps}{padding}}}
    inputs:
      {PROMPT}
""" for name, factory, onnx, data, steps, padding in (
        ("tie", "make_tied_llama", "tied", "prompts", 4, ""),
        ("tie-then-bug", "make_tied_llama", "tied", "prompts", 6, ""),
        ("maskless", "make_llama", "maskless", "prompts", 4, ""),
        ("maskless-padded", "make_llama", "maskless", "pairs", 4, ", left_padding: [0, 2]")))
    spec = folder / "parity.yaml"
    pairs = DATASET.replace("prompts", "pairs").replace("[1]", "[2]")
    spec.write_text(f"version: 1\ndatasets:\n  {DATASET}\n  {pairs}\nmodels:{models}")
    report = folder / "report.json"
    code = main(["run", str(spec), "--json", str(report), "--localize", "never",
                 "--causes", "never"])
    return {"code": code, "cases": by_id(json.loads(report.read_text()))}


def test_a_near_tie_alone_passes_and_says_so(planted: dict[str, Any]) -> None:
    case = planted["cases"]["tie[onnx-cpu-prompts-b1]"]
    tokens = case["details"]["tokens"]
    assert case["status"] == "passed", case["message"]
    assert (tokens["step"], tokens["expected"], tokens["actual"], tokens["near_tie"]) == (
        2, 1, 2, True)
    assert "at all 4 steps" in case["message"]
    said = next(n for n in case["notes"] if n.startswith("tokens diverge at step 2 of 4: 1 vs 2"))
    assert "a near tie, not drift" in said and "PyTorch's token" in said


def test_a_bug_after_a_near_tie_fails_at_its_own_step(planted: dict[str, Any]) -> None:
    """After the tie the two sides would decode different text; fed PyTorch's token, they
    decode the same, and the bug planted at step 5 fails there."""
    case = planted["cases"]["tie-then-bug[onnx-cpu-prompts-b1]"]
    assert case["status"] == "failed", case["message"]
    assert case["message"].startswith("step 5 of 6: logits"), case["message"]
    assert case["details"]["rollout"]["first_failing"] == 5
    assert case["details"]["tokens"]["near_tie"] and case["details"]["tokens"]["step"] == 2


def test_an_export_without_its_mask_fails_on_prompts_of_unequal_lengths(
        planted: dict[str, Any]) -> None:
    """A mask of ones on every row cannot tell an export that ignores the mask: that case
    passes and says padding went unchecked; two prompts of unequal lengths fail it."""
    alone = planted["cases"]["maskless[onnx-cpu-prompts-b1]"]
    assert alone["status"] == "passed", alone["message"]
    assert any(n.startswith("padding not checked") for n in alone["notes"]), alone["notes"]
    padded = planted["cases"]["maskless-padded[onnx-cpu-pairs-b2]"]
    assert padded["status"] == "failed", padded["message"]
    assert padded["message"].startswith(("step 1 of 4", "tokens diverge at step 1 of 4")), (
        padded["message"])
    assert any(n.startswith("prompts left-padded by 0, 2 tokens") for n in padded["notes"])


@pytest.mark.adapter
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_padded_batch_decodes_as_generate_does(name: str) -> None:
    """The reference of a left-padded batch, its mask and its positions, decodes the tokens
    generate() decodes from the same batch (up to a row's end-of-text token, after which
    generate() pads the row), the logits to float rounding."""
    import torch

    from fixtures import decoders
    from onnx_parity.run.adapters.causal_lm import GreedyDecode
    from onnx_parity.run.adapters.flat_cache import cache_layout, flat_cache_module
    from onnx_parity.run.adapters.greedy import LOGITS

    torch.manual_seed(0)
    lm = getattr(decoders, f"make_{name}")()
    layout, steps = cache_layout(lm), 6
    module, decode = flat_cache_module(lm, layout.layers), GreedyDecode(layout, steps, (0, 3))
    feed = decode.first_feed({"input_ids": torch.randint(1, decoders.VOCAB, (2, 6)).numpy()})
    assert feed["attention_mask"][1].tolist() == [0, 0, 0, 1, 1, 1]
    with torch.no_grad():
        served = lm.generate(torch.from_numpy(feed["input_ids"]),
                             attention_mask=torch.from_numpy(feed["attention_mask"]),
                             max_new_tokens=steps, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
    eos = lm.generation_config.eos_token_id
    for step in range(1, steps + 1):
        with torch.no_grad():
            out = module(*(torch.from_numpy(feed[i.name]) for i in layout.inputs))
        outputs = dict(zip(layout.outputs, (t.numpy() for t in out), strict=True))
        last, theirs = outputs[LOGITS][:, -1], served.logits[step - 1].numpy()
        for row in range(2):
            if eos in served.sequences[row, 6:6 + step - 1].tolist():
                continue  # generate() stopped this row
            assert last[row].argmax() == served.sequences[row, 6 + step - 1]
            assert abs(last[row] - theirs[row]).max() < 1e-5
        feed = decode.next_feed(step, feed, outputs)


def test_the_spec_refuses_a_rollout_past_its_limit_and_padding_without_the_adapter(
        tmp_path: Path) -> None:
    text = """version: 1
models:
  - name: lm
    torch: decoders.py:make_llama
    adapter: causal-lm
    rollout: {steps: 100000}
    inputs:
      input_ids: {shape: [batch, seq], dtype: int64, high: 64}
  - name: rnn
    torch: decoders.py:make_llama
    rollout: {steps: 4, feedback: {h_out: h}, left_padding: [0, 2]}
    inputs:
      h: [batch, 8]
"""
    (tmp_path / "decoders.py").write_text("")
    with pytest.raises(SpecError) as raised:
        parse_spec(text, tmp_path / "parity.yaml")
    said = str(raised.value)
    assert "parity.yaml:6:" in said and "expected an integer from 1 to 1024, got 100000" in said
    assert "parity.yaml:11:" in said and "rollout.left_padding pads the prompts of adapter: " \
        "causal-lm, and this model has no adapter" in said, said


def test_contracts_the_tool_itself_broke(tmp_path: Path) -> None:
    """A wrapper's forward(*args, **kwargs) around a decoder goes through the adapter (the
    cache's keyword found by the call that returns the very cache it was given) and around a
    one-call model through the dynamo exporter; a one-call GPT-2 bound by name with
    forward_args exports with TorchScript without an input of the exporter's own making
    (`logits_to_keep`, the default of a parameter before `use_cache`)."""
    import json

    from onnx_parity.cli.main import main

    shutil.copy(FIXTURE, tmp_path / "decoders.py")
    spec = tmp_path / "parity.yaml"
    spec.write_text(f"""version: 1
datasets:
  {DATASET}
models:
  - name: wrapped-lm
    torch: decoders.py:make_wrapped_gpt2
    adapter: causal-lm
    exporter: torchscript
    datasets: [prompts]
    rollout: {{steps: 3}}
    inputs:
      {PROMPT}
  - name: wrapped-mlp
    torch: decoders.py:make_wrapped_mlp
    exporter: dynamo
    inputs: {{x: [batch, 8]}}
  - name: gpt2-one-call
    torch: decoders.py:make_gpt2
    exporter: torchscript
    datasets: [prompts]
    forward_args: {{use_cache: false}}
    inputs:
      {PROMPT}
      attention_mask: {{shape: [batch, seq], dtype: int64, low: 1, high: 2}}
""")
    report = tmp_path / "report.json"
    code = main(["run", str(spec), "--json", str(report), "--localize", "never",
                 "--causes", "never"])
    cases = {c["model"]: c for c in json.loads(report.read_text())["cases"]}
    assert code == 0, [c["message"] for c in cases.values()]
    assert "greedy tokens agree for 3 of 3 steps" in cases["wrapped-lm"]["notes"]
    assert next(o["name"] for o in cases["gpt2-one-call"]["outputs"]) == "logits"


@pytest.mark.adapter
def test_prompts_past_the_vocabulary_or_the_positions_are_refused_with_the_limit() -> None:
    from fixtures.decoders import make_gpt2
    from onnx_parity.backends.pytorch import LoadedModule
    from onnx_parity.prepare.inputs import Sample
    from onnx_parity.run.adapters.causal_lm import GreedyDecode, within_limits
    from onnx_parity.run.adapters.flat_cache import cache_layout

    lm = make_gpt2()
    loaded = LoadedModule(type("Wrapped", (), {"lm": lm})(), ())
    decode = GreedyDecode(cache_layout(lm), 16)

    def fed(ids: np.ndarray) -> list[Sample]:
        return [Sample(inputs=decode.first_feed({"input_ids": ids}))]

    within_limits(loaded, decode, fed(np.full((1, 49), 63)))  # 49 + 15 = 64 positions
    with pytest.raises(LoadError) as raised:
        within_limits(loaded, decode, fed(np.full((1, 4), 900)))
    assert str(raised.value) == (
        "adapter: causal-lm: input_ids hold token 900, and the model's vocabulary has 64 "
        "(config.vocab_size): give inputs.input_ids high: 64 (token ids 0 to 63)")
    with pytest.raises(LoadError) as raised:
        within_limits(loaded, decode, fed(np.zeros((1, 60), dtype=np.int64)))
    assert str(raised.value) == (
        "adapter: causal-lm: a prompt of 60 tokens and rollout.steps 16 need 75 positions, and "
        "the model has 64 (config.max_position_embeddings): at most 5 steps after this prompt")
