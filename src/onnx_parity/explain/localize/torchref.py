"""The PyTorch reference: each module call's activations from forward hooks, matched to ONNX
tensors.

A module called more than once (torchvision's BasicBlock calls one ReLU twice; shared blocks,
tied heads, recurrent cells) gives one record per call, and its ONNX nodes are split into its
calls: the exporters mark nodes with the module, not with the call, but they emit a module's
calls in the order they ran. A call is keyed `path#k` (k from 0).

A tensor is paired with an ONNX tensor only when the pairing is certain: the one tensor of its
shape where it could be, or the one of several that agrees with it within tolerance. Several
candidates of one shape, none within tolerance (a Split's three outputs, a module returning a
tuple), are left uncompared and counted, never compared with a guess: a wrong pairing reads as
drift on a clean model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any

import numpy as np

from onnx_parity.explain.localize.graph import Array, GraphInfo
from onnx_parity.explain.localize.tensors import excess
from onnx_parity.frozen import frozen
from onnx_parity.results import Tolerance

Records = list[tuple[str, list[Array]]]  # (call key `path#k`, its tensors), call by call


@frozen
class TorchReference:
    values: Mapping[str, Array]  # ONNX tensor -> the PyTorch activation matched to it
    modules: Mapping[str, str]  # ONNX tensor -> the module it was matched through
    module_types: Mapping[str, str]  # module path -> class name; "" is the top-level module
    calls: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # tensor -> (k, of n)
    # what was left uncompared: "the output of module a.b" per tensor whose place in the graph
    # is uncertain, and the TorchScript submodules hooks cannot look into
    uncertain: tuple[str, ...] = ()
    scripted: tuple[str, ...] = ()

    def left_out(self) -> str:
        """What PyTorch could not give or pair, in words; "" where nothing was left out."""
        said = []
        if self.uncertain:
            n = len(self.uncertain)
            said.append(f"{n} of PyTorch's module inputs and outputs left"
                        " uncompared, not compared with a guess: several tensors of the graph"
                        " have their shape and none agrees within tolerance (first"
                        f" {self.uncertain[0]})" if n > 1 else
                        f"{self.uncertain[0]} left uncompared, not compared with a guess:"
                        " several tensors of the graph have its shape and none agrees within"
                        " tolerance")
        if self.scripted:
            inside = ", ".join(self.scripted)
            said.append(f"nothing inside {inside} was compared: a TorchScript submodule"
                        " (torch.jit.ScriptModule) takes no forward hooks, only what enters"
                        " and leaves it has a reference; give the eager module's factory to"
                        " look inside it")
        return "; ".join(said)


def torch_reference(module: Any, feeds: Mapping[str, Array], graph: GraphInfo,
                    actual: Mapping[str, Array], tolerance: Tolerance,
                    forward_args: Mapping[str, Any] | None = None,
                    binding: Any | None = None) -> TorchReference:
    """Each module's inputs and outputs from one forward pass, matched to the ONNX tensors they
    became: an output to a tensor made inside the module's scope and used outside it, an input
    to one made outside and used inside (a residual sum feeding a block has no module of its
    own, but it is the input of the modules it feeds)."""
    entering, leaving = _capture(module, feeds, forward_args or {}, binding)
    types = {name: type(m).__name__ for name, m in module.named_modules()}
    counts = _call_counts(entering)
    uncertain: list[str] = []
    if any(node.module is not None for node in graph.nodes):
        inside = _call_scopes(_scopes(graph, set(types)), counts)
        values, keys = _match_by_scope(leaving, graph, actual, tolerance, inside, uncertain)
        _match_inputs(entering, graph, actual, tolerance, inside, values, uncertain)
    else:
        values, keys = _match_by_values(leaving, graph, actual, tolerance, uncertain)
    modules = {tensor: _path(key) for tensor, key in keys.items()}
    calls = {tensor: (int(key.rsplit("#", 1)[1]), counts[_path(key)])
             for tensor, key in keys.items() if counts.get(_path(key), 1) > 1}
    return TorchReference(values, modules, types, calls, tuple(dict.fromkeys(uncertain)),
                          scripted_paths(module))


def scripted_paths(module: Any) -> tuple[str, ...]:
    """The outermost TorchScript submodules of an eager module: they take no hooks, so nothing
    inside them has a reference (their outputs do, as inputs of what follows)."""
    import torch

    found: list[str] = []
    for name, sub in module.named_modules():
        if isinstance(sub, torch.jit.ScriptModule) and not any(
                name == f or name.startswith(f + ".") for f in found):
            found.append(name)
    return tuple(found)


def _path(key: str) -> str:
    return key.rsplit("#", 1)[0]


def _call_counts(records: Records) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key, _ in records:
        counts[_path(key)] = counts.get(_path(key), 0) + 1
    return counts


def _call_scopes(inside: Mapping[str, set[int]], counts: Mapping[str, int]) -> dict[str, set[int]]:
    """Each call's nodes, keyed `path#k`: a module's nodes in graph order, split into its calls
    (equal runs when the calls made the same nodes, else the runs the graph order gives). Where
    the calls cannot be told apart, each call is matched within all of the module's nodes."""
    scopes: dict[str, set[int]] = {}
    for path, nodes in inside.items():
        calls = counts.get(path, 1)
        chunks = _split(sorted(nodes), calls) if calls > 1 else [sorted(nodes)]
        for k in range(max(calls, 1)):
            scopes[f"{path}#{k}"] = set(chunks[k]) if chunks else set(nodes)
    return scopes


def _split(ordered: list[int], calls: int) -> list[list[int]] | None:
    if len(ordered) % calls == 0:
        size = len(ordered) // calls
        return [ordered[k * size:(k + 1) * size] for k in range(calls)]
    runs: list[list[int]] = []
    for order in ordered:
        if runs and order == runs[-1][-1] + 1:
            runs[-1].append(order)
        else:
            runs.append([order])
    return runs if len(runs) == calls else None



def _capture(module: Any, feeds: Mapping[str, Array], forward_args: Mapping[str, Any],
             binding: Any | None = None) -> tuple[Records, Records]:
    """(call key, tensors) for each call's inputs, as calls start (parents first), and for its
    outputs, as calls finish (children first). A call's key is `path#k`, k counting the
    module's calls from 0, so a module called twice gives two records, not one overwritten."""
    import torch

    entering: Records = []
    leaving: Records = []
    started: dict[str, int] = {}
    stack: dict[str, list[int]] = {}

    def pre_hook(name: str) -> Callable[..., None]:
        def record(_module: Any, inputs: Any) -> None:
            call = started.get(name, 0)
            started[name] = call + 1
            stack.setdefault(name, []).append(call)
            entering.append((f"{name}#{call}", [_numpy(t) for t in _tensors(inputs)]))
        return record

    def hook(name: str) -> Callable[..., None]:
        def record(_module: Any, _inputs: Any, output: Any) -> None:
            call = stack[name].pop()
            leaving.append((f"{name}#{call}", [_numpy(t) for t in _tensors(output)]))
        return record

    handles = []
    scripted = scripted_paths(module)
    for name, sub in module.named_modules():
        if name and not any(name == s or name.startswith(s + ".") for s in scripted):
            handles.append(sub.register_forward_pre_hook(pre_hook(name)))
            handles.append(sub.register_forward_hook(hook(name)))
    try:
        # the PyTorch reference's module: only where there is a torch model
        from onnx_parity.backends.pytorch import Binding

        # The spec's inputs reach forward() as in the reference run: by name or by position.
        args, keywords = (binding or Binding()).call(
            {name: torch.from_numpy(np.array(a, copy=True)) for name, a in feeds.items()})
        with torch.no_grad():
            module(*args, **keywords, **forward_args)
    finally:
        for handle in handles:
            handle.remove()
    return entering, leaving


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []  # None, numbers, custom objects: nothing to compare


def _numpy(tensor: Any) -> Array:
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return np.array(tensor.numpy(), copy=True)  # a copy: in-place ops may change it later


def _match_by_scope(records: Records, graph: GraphInfo,
                    actual: Mapping[str, Array], tolerance: Tolerance,
                    inside: Mapping[str, set[int]], uncertain: list[str],
                    ) -> tuple[dict[str, Array], dict[str, str]]:
    """A call's output is a tensor made inside its scope and used outside it. Returns the
    values and, per tensor, the call key it was matched through; `uncertain` gets the calls
    whose output could be any of several tensors."""
    values: dict[str, Array] = {}
    modules: dict[str, str] = {}
    used: dict[str, set[str]] = {}  # per module: calls never share a tensor
    for index, (path, tensors) in enumerate(records):
        if path not in inside:
            continue
        exits = _exits(graph, inside[path])
        # Modules with no node of their own right after this one were fused into it (a batch
        # norm folded into its convolution): the tensor may hold their output instead.
        fused = []
        for later, later_tensors in records[index + 1:]:
            if later in inside:
                break
            fused.extend(later_tensors)
        for produced in tensors:
            taken = used.setdefault(_path(path), set())
            candidates = [t for t in exits if t in actual and t not in taken
                          and np.shape(actual[t]) == produced.shape]
            if not candidates:
                continue
            best = min(candidates, key=lambda t: (excess(produced, actual[t], tolerance),
                                                  -graph.position(t)[0]))
            chosen = produced
            if excess(produced, actual[best], tolerance) > 1:
                agreeing = [(t, f) for t in candidates for f in fused
                            if f.shape == produced.shape and excess(f, actual[t], tolerance) <= 1]
                if agreeing:
                    best, chosen = agreeing[0]
                elif len(candidates) > 1:
                    uncertain.append(f"the output of module {_path(path)}")
                    continue  # several tensors it could be, none agreeing: no guess
            taken.add(best)
            if best in values:
                continue  # a child's output already (a container returns its last child's)
            values[best] = chosen
            modules[best] = path
    return values, modules


def _match_inputs(entering: Records, graph: GraphInfo, actual: Mapping[str, Array],
                  tolerance: Tolerance, inside: Mapping[str, set[int]],
                  values: dict[str, Array], uncertain: list[str]) -> None:
    """Module inputs for the tensors no module output was matched to. An input closest to a
    tensor already matched is that tensor; one that agrees with none of several candidates
    (matched ones included) is left uncompared."""
    for path, tensors in entering:
        if path not in inside:
            continue
        entries = [t for t in _entries(graph, inside[path]) if t in actual]
        for received in tensors:
            candidates = [t for t in entries if np.shape(actual[t]) == received.shape]
            if not candidates:
                continue
            best = min(candidates, key=lambda t: (excess(received, actual[t], tolerance),
                                                  graph.position(t)))
            if excess(received, actual[best], tolerance) > 1 and len(candidates) > 1:
                uncertain.append(f"the input of module {_path(path)}")
                continue
            if best in values:
                continue  # already compared, as some module's output
            values[best] = received
            entries.remove(best)


def _scopes(graph: GraphInfo, known: set[str]) -> dict[str, set[int]]:
    """Module path → the nodes inside it, its submodules' included."""
    inside: dict[str, set[int]] = {}
    spelt: dict[str, str] = {}
    for node in graph.nodes:
        if node.module:
            if node.module not in spelt:
                spelt[node.module] = _known_path(node.module, known)
            parts = spelt[node.module].split(".")
            for size in range(1, len(parts) + 1):
                inside.setdefault(".".join(parts[:size]), set()).add(node.order)
    return inside


def _entries(graph: GraphInfo, inside: set[int]) -> list[str]:
    """Tensors made outside the nodes `inside` (not graph inputs) and used by them."""
    entries: dict[str, None] = {}
    for order in sorted(inside):
        for tensor in graph.nodes[order].inputs:
            made = graph.producer.get(tensor)
            if tensor in graph.dynamic and made is not None and made not in inside:
                entries[tensor] = None
    return list(entries)


def _known_path(path: str, known: set[str]) -> str:
    """A scope as one of the module's own paths, when the exporter spelt it differently."""
    if not known or path in known:
        return path
    plain = re.sub(r"_\d+(?=\.|$)", "", path)  # TorchScript numbers a scope's repeated calls
    if plain in known:
        return plain
    tail = path.rsplit(".", 1)[-1]
    matches = [k for k in known if k == tail or k.endswith("." + tail)]
    return matches[0] if len(matches) == 1 else path


def _exits(graph: GraphInfo, inside: set[int]) -> list[str]:
    exits = []
    outputs = set(graph.outputs)
    for order in sorted(inside):
        for tensor in graph.nodes[order].outputs:
            if tensor not in graph.dynamic:
                continue
            users = graph.consumers.get(tensor, ())
            if tensor in outputs or any(u not in inside for u in users):
                exits.append(tensor)
    return exits


def _match_by_values(records: Records, graph: GraphInfo,
                     actual: Mapping[str, Array], tolerance: Tolerance, uncertain: list[str],
                     ) -> tuple[dict[str, Array], dict[str, str]]:
    """Without scopes: each output, in call order, to the closest tensor of its shape at or
    after the previous match. The first module whose output matches nothing, with the next
    one unmatched too (a module fused into its neighbour leaves the next one matching), is
    where the drift starts: it stands for the first tensor of its shape after the last match.
    """
    by_shape: dict[tuple[int, ...], list[str]] = {}
    for node in graph.nodes:
        for tensor in node.outputs:
            if tensor in graph.dynamic and tensor in actual:
                by_shape.setdefault(tuple(np.shape(actual[tensor])), []).append(tensor)
    flat = [(path, produced) for path, tensors in records for produced in tensors]
    values: dict[str, Array] = {}
    modules: dict[str, str] = {}
    position = (-1, 0)
    last: str | None = None

    def closest(produced: Array, after: tuple[int, int]) -> tuple[float, str] | None:
        """The best-matching tensor of the same shape at or after `after`; earliest on ties."""
        pool = [t for t in by_shape.get(produced.shape, ()) if graph.position(t) >= after]
        scored = [(excess(produced, actual[t], tolerance), graph.position(t), t) for t in pool]
        best = min(scored, default=None)
        return None if best is None else (best[0], best[2])

    for index, (path, produced) in enumerate(flat):
        found = closest(produced, position)
        if found is not None and found[0] <= 1:
            values.setdefault(found[1], produced)
            modules.setdefault(found[1], path)
            position, last = graph.position(found[1]), found[1]
            continue
        following = flat[index + 1] if index + 1 < len(flat) else None
        ahead = closest(following[1], position) if following is not None else None
        if ahead is not None and ahead[0] <= 1:
            continue  # fused into the next module, which matches
        pool = [t for t in by_shape.get(produced.shape, ()) if graph.position(t) > position]
        below = graph.descendants(last) if last is not None else None
        stand_in = next((t for t in pool if below is None or t in below), None)
        maker = graph.node_of(stand_in) if stand_in is not None else None
        if maker is not None and sum(o in pool for o in maker.outputs) > 1:
            # one of a Split's outputs, say: which one it stands for is a guess
            uncertain.append(f"the output of module {_path(path)}")
            stand_in = None
        if stand_in is not None:
            values[stand_in] = produced
            modules[stand_in] = path
        break
    return values, modules
