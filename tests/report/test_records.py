"""Each record's schema, writer and reader (report/records.py) agree: a CaseDetails with every
record filled in, non-finite figures included, is written as JSON its schema accepts (by the
package's check and by jsonschema) and reads back equal."""

from __future__ import annotations

import json
import sys

from jsonschema import Draft202012Validator

from helpers import ROOT
from onnx_parity.report.jsonvalues import Reader
from onnx_parity.report.records import DETAILS_SCHEMA, details_dict, read_details
from onnx_parity.spec.conforms import conforms, violation

sys.path.insert(0, str(ROOT / "scripts"))
import report_fuzz  # beside the other scripts, not a package; its seeds hold every record


def test_every_record_is_written_as_its_schema_says_and_reads_back() -> None:
    details = report_fuzz.every_record()
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
    written = json.loads(json.dumps(details_dict(report_fuzz.every_record())))
    written["tokens"]["agreed"] = -1
    written["float16"]["failing"]["max_abs"] = "big"
    assert violation(written, DETAILS_SCHEMA) == (("float16", "failing", "max_abs"),
                                                  "expected a number or \"inf\", \"-inf\", "
                                                  "\"nan\", found 'big'")
    del written["float16"]
    assert violation(written, DETAILS_SCHEMA) == (("tokens", "agreed"), "-1 is less than 0")
    assert not conforms(written, DETAILS_SCHEMA)
