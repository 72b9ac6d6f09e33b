"""Recorded data read as untrusted input (prepare/recorded.py): every file that cannot be read is
an error naming it and what is wrong; pickles are never loaded; big-endian data gets the verdict
little-endian data gets; external data resolves beside the .pb that names it; `--max-input-mb`
holds before anything is loaded, a zip bomb included; and recorded outputs that a model with
`torch:` does not compare are named in a note."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import external_data_helper, numpy_helper

from helpers import ROOT, by_id
from onnx_parity.errors import LoadError
from onnx_parity.prepare.inputs import recorded_samples
from onnx_parity.spec import DatasetSpec, InputSpec

X = InputSpec("x", ("batch", 3), "float32")


def _npz(path: Path, budget: int = 2 << 30) -> Any:
    return recorded_samples(DatasetSpec("rec", "npz", path=path), None, [X], ["y"],
                            budget=budget)


def _saved(tmp_path: Path, **arrays: Any) -> Path:
    path = tmp_path / "data.npz"
    np.savez_compressed(path, **arrays)
    return path


# -- every unreadable file names itself and what is wrong --------------------------------------

def test_not_a_zip_and_truncated(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    path.write_bytes(b"not a zip at all")
    with pytest.raises(LoadError, match=r"data\.npz is not an npz file \(a zip of \.npy "
                                        r"arrays\), or it is truncated: File is not a zip"):
        _npz(path)
    whole = _saved(tmp_path, x=np.ones((2, 3), np.float32)).read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(LoadError, match=r"data\.npz is not an npz file .* or it is truncated"):
        _npz(path)
    with pytest.raises(LoadError, match=r"missing\.npz does not exist"):
        _npz(tmp_path / "missing.npz")


def test_a_damaged_member_names_itself(tmp_path: Path) -> None:
    path = _saved(tmp_path, x=np.arange(3000, dtype=np.float32).reshape(1000, 3))
    data = bytearray(path.read_bytes())
    middle = len(data) // 3
    data[middle:middle + 64] = bytes(64)  # the directory at the end stays whole
    path.write_bytes(bytes(data))
    with pytest.raises(LoadError, match=r"data\.npz: member 'x\.npy' cannot be read \(damaged "
                                        r"or truncated\?\)"):
        _npz(path)


def test_members_that_are_not_npy_arrays(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", b"\x93NUMPY not really")
    with pytest.raises(LoadError, match=r"member 'x\.npy' is not a \.npy array: "):
        _npz(path)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes.txt", b"hello")
    with pytest.raises(LoadError, match=r"data\.npz: member 'notes\.txt' is not a \.npy array; "
                                        "an npz holds one .npy file per array"):
        _npz(path)


class _Payload:
    """Unpickling it would run os.mkdir: proof that nothing is unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


def test_pickled_objects_are_refused_never_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    path = tmp_path / "data.npz"
    np.savez(path, x=np.array([_Payload(marker)], dtype=object))
    with pytest.raises(LoadError, match=r"data\.npz: member 'x\.npy' holds Python objects "
                                        r"\(dtype object\), which only unpickling could load"):
        _npz(path)
    assert not marker.exists()


def test_a_member_name_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    np.savez(path, **{"xé": np.ones((1, 3), np.float32)})  # zip marks the name UTF-8
    path.write_bytes(path.read_bytes().replace("xé".encode(), b"x\xff\xfe"))
    with pytest.raises(LoadError, match=r"data\.npz: a member's name is not UTF-8, though the "
                                        r"zip says it is \(byte 0xff\)"):
        _npz(path)


# -- byte order ----------------------------------------------------------------------------------

def test_big_endian_arrays_come_back_in_the_machines_order(tmp_path: Path) -> None:
    values = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    (sample,) = _npz(_saved(tmp_path, x=values.astype(">f4"), y=values.astype(">f4")))
    assert sample.inputs["x"].dtype == np.float32 and sample.inputs["x"].dtype.isnative
    np.testing.assert_array_equal(sample.inputs["x"], values)
    np.testing.assert_array_equal(sample.reference_by_name["y"], values)


def _golden_npz(tmp_path: Path, order: str) -> None:
    """The golden head's first test set as an npz, in the byte order `order`."""
    folder = ROOT / "examples" / "golden" / "data" / "test_data_set_0"
    features, probs = (numpy_helper.to_array(onnx.load_tensor(str(folder / f"{n}_0.pb")))
                       for n in ("input", "output"))
    name = "little" if order == "<" else "big"
    np.savez(tmp_path / f"{name}.npz", features=features.astype(f"{order}f4"),
             probs=probs.astype(f"{order}f4"))


def test_big_endian_data_gets_the_little_endian_verdict(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    """Fed as is, ONNX Runtime read big-endian floats as little-endian: a drift of 4e37."""
    for order in "<>":
        _golden_npz(tmp_path, order)
    shutil.copy(ROOT / "examples" / "golden" / "head.onnx", tmp_path / "head.onnx")
    spec = tmp_path / "parity.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        datasets:
          little: {kind: npz, path: little.npz}
          big: {kind: npz, path: big.npz}
        models:
          - name: head
            onnx: head.onnx
            datasets: [little, big]
        """))
    code, _, _, report = run_cli(spec)
    assert code == 0, [c["message"] for c in report["cases"]]
    little, big = (c["outputs"][0] for c in report["cases"])
    assert big["max_abs"] == little["max_abs"] < 1e-5


# -- external data ---------------------------------------------------------------------------

def _external_set(folder: Path, location: str, data_file: Path) -> np.ndarray:
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = numpy_helper.from_array(values, "x")
    data_file.parent.mkdir(parents=True, exist_ok=True)
    data_file.write_bytes(tensor.raw_data)
    external_data_helper.set_external_data(tensor, location=location)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.ClearField("raw_data")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "input_0.pb").write_bytes(tensor.SerializeToString())
    return values


def test_external_data_resolves_beside_the_pb_not_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "data" / "test_data_set_0"
    values = _external_set(folder, "x.bin", folder / "x.bin")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.bin").write_bytes(bytes(24))  # what the working directory would have given
    monkeypatch.chdir(elsewhere)
    data = DatasetSpec("set", "onnx-test-data", path=tmp_path / "data")
    (sample,) = recorded_samples(data, None, [X], [])
    np.testing.assert_array_equal(sample.inputs["x"], values)

    _external_set(folder, "../../outside.bin", tmp_path / "outside.bin")
    with pytest.raises(LoadError, match=r"input_0\.pb: the external data of tensor 'x', "
                                        r"'\.\./\.\./outside\.bin', is not in the folder"):
        recorded_samples(data, None, [X], [])
    _external_set(folder, "gone.bin", tmp_path / "unused.bin")
    with pytest.raises(LoadError, match=r"input_0\.pb: the external data of tensor 'x', "
                                        r"'gone\.bin' beside it, cannot be read: No such file"):
        recorded_samples(data, None, [X], [])


# -- --max-input-mb ------------------------------------------------------------------------------

def test_the_budget_holds_for_every_kind_of_file(tmp_path: Path) -> None:
    path = _saved(tmp_path, x=np.zeros((1000, 3), np.float32))
    assert _npz(path, budget=12_128)[0].inputs["x"].shape == (1000, 3)  # 128: the header
    with pytest.raises(LoadError, match=r"data\.npz: its members expand to 12,128 bytes, more "
                                        r"than the 12,127 bytes a case's recorded data may take "
                                        r"\(--max-input-mb\)"):
        _npz(path, budget=12_127)
    # A header that declares more than the member holds: refused before numpy allocates it.
    lying = tmp_path / "lying.npz"
    with zipfile.ZipFile(lying, "w") as archive, archive.open("x.npy", "w") as member:
        np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False,
                                                      "shape": (1 << 40, 3)})
    with pytest.raises(LoadError, match=r"lying\.npz: member 'x\.npy' \(float32 \[1099511627776,"
                                        r" 3\]\) takes 12,288\.0 GiB|lying\.npz: member 'x\.npy'"
                                        r" \(float32 \[1099511627776, 3\]\) takes"):
        _npz(lying)
    # A .pb: its size, its tensors' declared sizes, and their external data's.
    folder = tmp_path / "set"
    _external_set(folder, "x.bin", folder / "x.bin")
    data = DatasetSpec("set", "onnx-test-data", path=folder)
    assert recorded_samples(data, None, [X], [], budget=30)
    (folder / "x.bin").write_bytes(bytes(1 << 20))  # more data than the tensor says it holds
    with pytest.raises(LoadError, match=r"input_0\.pb: the external data of tensor 'x' \(x\.bin\)"
                                        r" takes 1\.0 MiB, more than the 1,048,575 bytes a case's"):
        recorded_samples(data, None, [X], [], budget=(1 << 20) - 1)
    tensor = onnx.load_tensor(str(folder / "input_0.pb"))
    tensor.dims[0] = 1 << 40
    (folder / "input_0.pb").write_bytes(tensor.SerializeToString())
    with pytest.raises(LoadError, match=r"input_0\.pb: tensor 'x' \[1099511627776, 3\] takes "
                                        r"12,288\.0 GiB|input_0\.pb: tensor 'x' \[1099511627776"):
        recorded_samples(data, None, [X], [])
    (folder / "input_0.pb").write_bytes(
        numpy_helper.from_array(np.zeros((40, 3), np.float32)).SerializeToString())
    with pytest.raises(LoadError, match=r"input_0\.pb: the file takes 4\d\d bytes, more than"):
        recorded_samples(data, None, [X], [], budget=100)


_VALID_PB = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3),
                                    "x").SerializeToString()


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(
    st.integers(0, len(_VALID_PB) - 1).map(lambda n: _VALID_PB[:n]),  # truncated
    st.tuples(st.integers(0, len(_VALID_PB) - 1), st.integers(1, 255)).map(  # one byte flipped
        lambda at: _VALID_PB[:at[0]] + bytes([_VALID_PB[at[0]] ^ at[1]]) + _VALID_PB[at[0] + 1:]),
    st.binary(max_size=64)))  # anything
def test_a_mutated_pb_reads_or_is_refused_naming_itself(tmp_path: Path, data: bytes) -> None:
    """Whatever a .pb holds, it reads as a value within the budget or is a LoadError that names
    the file: never another exception, never past the budget."""
    folder = tmp_path / "fuzz"
    folder.mkdir(exist_ok=True)
    (folder / "input_0.pb").write_bytes(data)
    try:
        for budget in (1 << 20, 16):
            for sample in recorded_samples(DatasetSpec("set", "onnx-test-data", path=folder),
                                           None, [X], [], budget=budget):
                value = sample.inputs.get("x")
                assert value is None or np.asarray(value).nbytes <= budget
    except LoadError as exc:
        assert "input_0.pb" in str(exc)


def test_a_folder_where_a_pb_should_be_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "input_0.pb").mkdir()
    with pytest.raises(LoadError, match=r"input_0\.pb cannot be read: Is a directory"):
        recorded_samples(DatasetSpec("set", "onnx-test-data", path=tmp_path), None, [X], [])


def test_a_data_set_is_its_files_in_order_and_a_dangling_link_is_no_file(tmp_path: Path) -> None:
    root = tmp_path / "data"
    for index, value in enumerate((1.0, 2.0)):
        folder = root / f"test_data_set_{index}"
        folder.mkdir(parents=True)
        x = np.full((1, 3), value, np.float32)
        (folder / "input_0.pb").write_bytes(numpy_helper.from_array(x, "x").SerializeToString())
        (folder / "output_0.pb").write_bytes(
            numpy_helper.from_array(x * 2, "y").SerializeToString())
        # a link to nothing ends the outputs as a missing file would; output_2.pb is not read
        (folder / "output_1.pb").symlink_to(tmp_path / "gone.pb")
        (folder / "output_2.pb").write_bytes(b"not read")
    (root / "test_data_set_2").write_text("a file, not a data set")
    samples = recorded_samples(DatasetSpec("set", "onnx-test-data", path=root), None, [X], [])
    assert [float(s.inputs["x"][0, 0]) for s in samples] == [1.0, 2.0]
    assert [len(s.reference_by_position) for s in samples] == [1, 1]
    assert float(np.asarray(samples[1].reference_by_position[0])[0, 0]) == 4.0
    # input_0.pb in the folder itself: the folder is the one data set
    (root / "input_0.pb").symlink_to(root / "test_data_set_0" / "input_0.pb")
    only = recorded_samples(DatasetSpec("set", "onnx-test-data", path=root), None, [X], [])
    assert len(only) == 1 and float(only[0].inputs["x"][0, 0]) == 1.0


_BOMB = """
import resource, sys
from pathlib import Path
from onnx_parity.errors import LoadError
from onnx_parity.prepare.inputs import recorded_samples
from onnx_parity.spec import DatasetSpec, InputSpec

def vm() -> int:
    fields = Path("/proc/self/status").read_text().split("VmSize:")[1].split()
    return int(fields[0]) << 10

limit = vm() + (48 << 20)  # 48 MiB more than the process has: the bomb expands to 128
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
data = DatasetSpec("rec", "npz", path=Path(sys.argv[1]))
for budget in (int(sys.argv[2]), 1 << 40):
    try:
        recorded_samples(data, None, [InputSpec("x", ("batch",), "float32")], [], budget=budget)
    except LoadError as exc:
        print(exc)
"""


def test_a_zip_bomb_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    """A 0.6 MB npz that expands to 128 MiB, read in a process that may take 48 MiB more: with
    the budget it is refused unread, naming the file and the limit; without, the allocation
    that fails is still an error naming the file, not a MemoryError."""
    bomb = tmp_path / "bomb.npz"
    size = 128 << 20
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive, \
            archive.open("x.npy", "w") as member:
        np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False,
                                                      "shape": (size // 4,)})
        chunk = bytes(1 << 20)
        for _ in range(size >> 20):
            member.write(chunk)
    assert bomb.stat().st_size < 1 << 20
    done = subprocess.run([sys.executable, "-c", _BOMB, str(bomb), str(32 << 20)],
                          capture_output=True, text=True, check=False, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr
    refused, failed = done.stdout.splitlines()
    assert refused.startswith(f"{bomb}: its members expand to 128.0 MiB, more than the "
                              "32.0 MiB a case's recorded data may take (--max-input-mb)")
    assert failed == f"{bomb}: member 'x.npy' does not fit in memory"


# -- recorded outputs beside a PyTorch reference -------------------------------------------------

def test_recorded_outputs_of_a_torch_model_are_named_not_dropped(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any], tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "data.npz", x=rng.standard_normal((2, 4)).astype(np.float32),
             output_0=np.full((2, 4), 1e6, np.float32))  # far from what the module gives
    spec = write_spec("""
        version: 1
        datasets:
          recorded: {kind: npz, path: data.npz}
        models:
          - name: lin
            torch: models.py:make_linear
            inputs: {x: {shape: [batch, 4]}}
            datasets: [recorded]
            opsets: [18]
    """)
    code, _, _, report = run_cli(spec)
    (case,) = by_id(report).values()
    assert code == 0 and case["status"] == "passed"  # compared with PyTorch's own run
    assert any(note.startswith("dataset 'recorded' also holds recorded outputs (output_0); "
                               "they are not compared: with `torch:` the reference is the "
                               "PyTorch module's own run") for note in case["notes"])
