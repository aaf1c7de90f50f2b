"""The graph data structure and the registry sit below what they reach: the compile pipeline,
the exporter and the op library are loaded by name on first use (docs/architecture.md)."""
import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return "\n".join(line[3:] for line in out.stdout.splitlines() if line.startswith(">> "))


def test_onnx_loader_imports_the_op_library_only_when_it_looks_an_op_up():
    out = _run("""
        import sys
        import dsl.onnx.load
        print('>>', 'ops' in sys.modules)
        from dsl.opgraph import registry
        print('>>', registry.lookup('', 'Relu').__module__, 'ops' in sys.modules)
    """)
    assert out.split() == ["False", "ops.elementwise", "True"]


def test_graph_reaches_compiler_and_exporter_through_installed_hooks():
    out = _run("""
        import sys
        import numpy as np
        from dsl.opgraph import graph
        print('>>', 'dsl.opgraph.compiler' in sys.modules, 'dsl.onnx.export' in sys.modules)
        from dsl.opgraph.registry import lookup
        g = graph.Graph('g')
        x = g.input('x', (4,), 'f32')
        g.output(lookup('', 'Relu')()(x), 'y')
        model = g.compile(backend='interpreter')
        y = model.run({'x': np.array([-1, 2, -3, 4], np.float32)})['y']
        print('>>', y.tolist(), g.to_onnx().graph.node[0].op_type)
        print('>>', 'dsl.opgraph.compiler' in sys.modules, 'dsl.onnx.export' in sys.modules)
    """)
    lines = out.splitlines()
    assert lines[0] == "False False"
    assert lines[1] == "[0.0, 2.0, 0.0, 4.0] Relu"
    assert lines[2] == "True True"


def test_unknown_graph_hook_is_refused():
    import pytest
    from dsl.opgraph import graph
    with pytest.raises(ValueError, match="unknown graph hook 'fold'"):
        graph.install("fold", lambda g: g)


def test_readers_maps_every_read_tensor_to_its_nodes_in_order():
    from dsl.opgraph.graph import Graph
    from dsl.opgraph.registry import lookup
    g = Graph("g")
    x = g.input("x", (4,), "f32")
    relu, add = lookup("", "Relu"), lookup("", "Add")
    a = relu()(x)
    b = add()(x, a)
    readers = g.readers()
    assert [n.op_type for n in readers[id(x)]] == ["Relu", "Add"]
    assert [n.op_type for n in readers[id(a)]] == ["Add"]
    assert id(b) not in readers
    assert readers[id(x)] == g.consumers(x)
