"""Each record's schema, writer and reader (report/records.py) agree: a CaseDetails with every
record filled in, non-finite figures included, is written as JSON its schema accepts (by the
package's check and by jsonschema) and reads back equal."""

from __future__ import annotations

import json
import math

from jsonschema import Draft202012Validator

from onnx_parity.findings import (
    BundleRecord,
    CallTimes,
    CaseDetails,
    CauseRecord,
    DriftRecord,
    ExpectationRecord,
    Float16Record,
    LatencyRecord,
    NodeCost,
    NumericsRecord,
    PathStep,
    ProvidersRecord,
    RangeRecord,
    RolloutRecord,
    RolloutStep,
    TokenRecord,
)
from onnx_parity.report.jsonvalues import Reader
from onnx_parity.report.records import DETAILS_SCHEMA, details_dict, read_details
from onnx_parity.spec.conforms import conforms, violation


def _every_record() -> CaseDetails:
    step = PathStep(tensor="t", node="n", op_type="Add", module="m", within=False,
                    max_abs=math.inf, sqnr=12.5, nonfinite="inf")
    overflow = RangeRecord(tensor="t", kind="overflow", max_abs=7e4, node="n", op_type="Mul")
    cause = CauseRecord(kind="tf32", proven=True, message="m", setting="s", output="y",
                        before={"max_abs": 1.0}, after={"max_abs": 0.0, "passed": True},
                        provider_options={"CUDAExecutionProvider": {"use_tf32": "0"}})
    times = CallTimes(median_ms=2.0, q1_ms=1.5, q3_ms=2.5, repeats=9, device="cuda")
    return CaseDetails(
        divergence=DriftRecord(verdict="quality", headline="h", summary="s", reference="r",
                               sample=0, compared=3, node="n", op_type="Add", module="m",
                               module_type="Linear", tensor="t", max_abs=math.nan,
                               path=(step,), segment=("a", "b"), other_origins=2,
                               threshold_db=20.0, sqnr=-math.inf, worst=(step,), seconds=0.5),
        cause=cause,
        causes_ruled_out=(CauseRecord(kind="graph", proven=False, message="no"),),
        numerics=NumericsRecord(provider_options={"CUDAExecutionProvider": {"a": "1"}},
                                gpu="H200", compute_capability="9.0", tf32=True,
                                session_options={"intra_op_num_threads": 1},
                                tf32_override="0"),
        providers=ProvidersRecord(requested=("CUDAExecutionProvider",),
                                  active=("CUDAExecutionProvider", "CPUExecutionProvider"),
                                  nodes={"CPUExecutionProvider": {"Shape": 2}},
                                  cpu_shape_nodes={"Shape": 2}, fallback_reason="r",
                                  runtime={"python": "/usr/bin/python3"}),
        bundle=BundleRecord(path="b", command="c"),
        float16=Float16Record(nodes=4, float16_nodes=3, range_checked=True, leaving=1,
                              ranges=(overflow,), failing=overflow,
                              reference_overflow=("y",)),
        not_compared=("z",), export_log="log", worker_log=("last",),
        other={"newer": [1, "x"]},
        rollout=RolloutRecord(steps=2, feedback={"h": "h_in"},
                              per_step=(RolloutStep(step=1, passed=True, max_abs={"y": 0.0}),
                                        RolloutStep(step=2, passed=False,
                                                    max_abs={"y": math.inf},
                                                    failing=("y",))),
                              first_failing=2, judged=2, output="y", growth=math.inf,
                              growth_from=1, floor=1e-6),
        expectation=ExpectationRecord(model="m", status="failed", reason="r", until="2030-01-01",
                                      line=3, verdict="met", ended="failed"),
        latency=LatencyRecord(onnxruntime=times, pytorch=times, ratio=1.0, cpu=times,
                              seconds=0.1, baseline_ms=1.0, regressed=True,
                              costliest=(NodeCost(node="n", op_type="Add", provider="CUDA",
                                                  ms=0.5),),
                              profile="p.json", per="step"),
        tokens=TokenRecord(steps=4, agreed=2, comparable=4, step=3, sample=0, row=1,
                           expected=7, actual=8, gap=0.5, allowed=0.25, near_tie=False,
                           diverged=3),
        cache={"export": "hit"},
    )


def test_every_record_is_written_as_its_schema_says_and_reads_back() -> None:
    details = _every_record()
    written = json.loads(json.dumps(details_dict(details)))  # JSON's own types, as read back
    assert set(written) == {"divergence", "cause", "causes_ruled_out", "numerics", "providers",
                            "bundle", "float16", "not_compared", "export_log", "worker_log",
                            "newer", "rollout", "expectation", "latency", "tokens", "cache"}
    assert violation(written, DETAILS_SCHEMA) is None
    assert conforms(written, DETAILS_SCHEMA)
    assert Draft202012Validator(DETAILS_SCHEMA).is_valid(written)
    back = read_details(Reader(written, "details"))
    # Compared as written: the figures' NaN is never equal to itself, its "nan" is.
    assert details_dict(back) == details_dict(details)
    assert back.tokens == details.tokens and back.latency == details.latency
    assert back.expectation == details.expectation and back.providers == details.providers


def test_a_record_its_schema_refuses_is_located() -> None:
    written = json.loads(json.dumps(details_dict(_every_record())))
    written["tokens"]["agreed"] = -1
    written["float16"]["failing"]["max_abs"] = "big"
    assert violation(written, DETAILS_SCHEMA) == (("float16", "failing", "max_abs"),
                                                  "expected a number or \"inf\", \"-inf\", "
                                                  "\"nan\", found 'big'")
    del written["float16"]
    assert violation(written, DETAILS_SCHEMA) == (("tokens", "agreed"), "-1 is less than 0")
    assert not conforms(written, DETAILS_SCHEMA)
