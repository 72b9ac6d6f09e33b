"""What a model's code reads, as the export cache's key sees it (prepare/reads.py): opens to
read and imports inside a window, an import of a module already loaded too, nothing outside a
window, files written left out; and a network connection, which no key vouches for."""

from __future__ import annotations

import builtins
import contextlib
import socket
from pathlib import Path

from onnx_parity.prepare.cachekey import Unvouched, imported, read_files
from onnx_parity.prepare.reads import Recording


def test_a_window_records_reads_and_imports_and_nothing_outside_it(tmp_path: Path) -> None:
    config, output = tmp_path / "config.json", tmp_path / "out.txt"
    config.write_text("{}")
    plain_import = builtins.__import__
    reads = Recording()
    with reads:
        config.read_text()
        output.write_text("made here")  # written, not read: not an input
        with contextlib.suppress(FileNotFoundError):
            (tmp_path / "absent.json").read_text()
        import json  # noqa: F401  already loaded: no import event, the statement is seen
    assert builtins.__import__ is plain_import  # restored when the window closed
    config.read_text()
    (tmp_path / "later.txt").write_text("")
    (tmp_path / "later.txt").read_text()  # outside the window: not recorded
    assert list(reads.files) == [str(config), str(tmp_path / "absent.json")]
    assert reads.modules["json"] == __file__  # named with the file that imported it
    assert not reads.unsure
    # json is the standard library's: in the key as Python's version, not as a package
    assert imported(reads) == ["json"]
    assert read_files(reads.files, tmp_path) == [
        ("absent.json", "absent"),
        ("config.json", "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"),
    ]


def test_source_read_to_show_a_traceback_or_a_warning_is_not_a_read(tmp_path: Path) -> None:
    # A lazy import that warns once per process reads the stack's source lines through
    # linecache: in the first model's window only, so its key differed from the next run's.
    import linecache
    import warnings

    shown, config = tmp_path / "shown.py", tmp_path / "config.json"
    shown.write_text("x = 1\n")
    config.write_text("{}")
    reads = Recording()
    with reads, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        linecache.checkcache()
        linecache.getline(str(shown), 1)
        config.read_text()
    assert list(reads.files) == [str(config)]


def test_a_network_connection_leaves_nothing_the_key_can_vouch_for(tmp_path: Path) -> None:
    from onnx_parity.prepare.cachekey import model_key

    listener = socket.create_server(("127.0.0.1", 0))
    reads = Recording()
    with reads, socket.create_connection(listener.getsockname()):
        pass
    listener.close()
    assert list(reads.unsure) == ["opened a network connection"]
    try:
        model_key(None, reads, {}, tmp_path)
    except Unvouched as exc:
        assert str(exc) == "its factory or first forward() opened a network connection"
    else:
        raise AssertionError("a key vouched for a network read")
