"""The runner of the docs' examples: which blocks run, its markers, and what a failure reports."""
import sys
import textwrap
import numpy as np
import pytest

from doc_blocks import DocFormatError, parse, run_page, run_page_in_sandbox

PAGE = textwrap.dedent("""\
    # A page
    <!-- doc-requires: opencl, onnxruntime -->

    ```python
    a = 1
    ```

    ```bash
    opdsl demo
    ```

    <!-- doc-setup: b = 2 -->
    ```python
    c = a + b
    ```

    ````markdown
    ```python
    not run: inside another fence
    ```
    <!-- doc-requires: nothing-inside-a-fence -->
    ````
    ```` ```python ```` in a sentence opens no fence.
    - a list item:
      <!-- doc-setup:
      d = 2
      -->
      ```py
      e = c * d
      ```
    """)


def test_python_blocks_their_lines_and_setup():
    page = parse(PAGE)
    assert page.requires == ["opencl", "onnxruntime"]
    assert [(b.line, b.code) for b in page.blocks] == [(5, "a = 1"), (14, "c = a + b"), (29, "e = c * d")]
    assert [(b.setup_line, b.setup) for b in page.blocks] == [(0, ""), (12, "b = 2"), (26, "d = 2")]


def test_multiline_setup_keeps_its_lines():
    page = parse("<!-- doc-setup:\nx = 1\ny = x + 1\n-->\n\n```python\nprint(y)\n```\n")
    assert (page.blocks[0].setup_line, page.blocks[0].setup) == (2, "x = 1\ny = x + 1")


@pytest.mark.parametrize("text, message", [
    ("<!-- doc-setup: x = 1 -->\nSome prose.\n```python\nx\n```\n",
     "p.md:1: a doc-setup comment must stand directly above a ```python block (only blank lines between), "
     "but line 2 comes first"),
    ("<!-- doc-setup: x = 1 -->\n```text\nx\n```\n", "p.md:1: a doc-setup comment must be followed by a "
     "```python block, not a ```text block"),
    ("<!-- doc-setup: x = 1 -->\n<!-- doc-setup: y = 1 -->\n```python\n```\n", "p.md:1: a doc-setup comment "
     "must be followed by a ```python block, but another doc-setup comes first"),
    ("text\n<!-- doc-setup: x = 1 -->\n", "p.md:2: a doc-setup comment with no ```python block after it"),
    ("<!-- doc-setup:\nx = 1\n", "p.md:1: the doc-setup comment is never closed with -->"),
    ("<!-- doc-skip: why -->\n", "p.md:1: unknown marker doc-skip; the markers are doc-setup and doc-requires"),
    ("<!-- doc-requires:\nopencl -->\n", "p.md:1: write doc-requires on one line as "
     "<!-- doc-requires: opencl onnxruntime -->"),
    ("text\n```python\nx = 1\n", "p.md:2: the ``` fence opened here is never closed"),
    ("```\n$ opdsl demo\n```\n", "p.md:1: a fence needs a language: ```python runs; ```text (output), "
     "```bash, ```yaml and the like do not"),
])
def test_bad_markers_name_the_page_and_line(text, message):
    with pytest.raises(DocFormatError) as e:
        parse(text, "p.md")
    assert str(e.value) == message


def _run(tmp_path, text, capsys, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(text))
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])  # run_page replaces it
    code = run_page(page, "page.md")
    return code, capsys.readouterr()


def test_blocks_share_one_namespace_in_order(tmp_path, capsys, monkeypatch):
    code, out = _run(tmp_path, """\
        ```python
        x = [1]
        ```
        <!-- doc-setup: x.append(2) -->
        ```python
        x.append(3)
        print(x)
        ```
        """, capsys, monkeypatch)
    assert (code, out.out, out.err) == (0, "[1, 2, 3]\n", "")


def test_blocks_run_as_a_script_main_module_whose_objects_pickle(tmp_path, capsys, monkeypatch):
    code, out = _run(tmp_path, """\
        ```python
        import pickle

        class Point:
            def __init__(self, x):
                self.x = x

        print(__name__, pickle.loads(pickle.dumps(Point(3))).x)
        ```
        """, capsys, monkeypatch)
    assert (code, out.out, out.err) == (0, "__main__ 3\n", "")


def test_a_page_runs_in_an_empty_folder_that_sees_the_examples(tmp_path, capsys, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("```python\nimport os\nprint(sorted(os.listdir()), os.path.isdir('examples/qaic_package'))\n"
                    "open('model.onnx', 'w').close()\n```\n")
    monkeypatch.chdir(tmp_path)                                        # run_page_in_sandbox leaves it
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    assert run_page_in_sandbox(page) == 0
    assert capsys.readouterr().out == "['examples'] True\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.md"]   # nothing written next to the page


def test_a_failure_names_the_page_the_block_line_and_the_traceback(tmp_path, capsys, monkeypatch):
    code, out = _run(tmp_path, """\
        ```python
        def half(v):
            return v / 0
        ```

        Prose.

        ```python
        y = 1
        half(y)
        ```
        """, capsys, monkeypatch)
    assert code == 1
    assert out.err.startswith("page.md: the python block at line 9 failed:\nTraceback (most recent call last):\n")
    page = str((tmp_path / "page.md").resolve())
    assert f'File "{page}", line 10, in <module>' in out.err       # the line in the .md
    assert f'File "{page}", line 3, in half' in out.err
    assert "ZeroDivisionError: division by zero" in out.err
    assert "doc_blocks.py" not in out.err                            # the runner's frame is hidden


def test_a_failing_setup_and_a_syntax_error_are_reported_as_such(tmp_path, capsys, monkeypatch):
    setup_fails = "<!-- doc-setup: import no_such_module_here -->\n```python\nx = 1\n```\n"
    code, out = _run(tmp_path, setup_fails, capsys, monkeypatch)
    assert code == 1 and out.err.startswith("page.md: the doc-setup (line 1) of the python block at line 3 failed")
    assert "ModuleNotFoundError" in out.err
    assert "says so with <!-- doc-requires: no_such_module_here -->" in out.err
    code, out = _run(tmp_path, "Text.\n\n```python\nx = (\n```\n", capsys, monkeypatch)
    assert code == 1 and "page.md: the python block at line 4 failed" in out.err
    assert "SyntaxError" in out.err and 'line 4' in out.err


def test_a_kernel_defined_in_a_block_compiles_and_runs(tmp_path, backend, monkeypatch, capsys):
    """The frontend reads a kernel's source from the .md file itself (inspect through linecache)."""
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(f"""\
        A kernel:

        ```python
        import numpy as np
        import dsl
        from dsl import In, Out, f32

        @dsl.kernel
        def twice(x: In[f32], y: Out[f32]):
            lo, hi = dsl.split(x.size)
            for i in range(lo, hi):
                y.flat[i] = 2.0 * x.flat[i]
        ```

        ```python
        x = np.arange(10, dtype=np.float32)
        y = np.empty_like(x)
        twice(x, y, backend="{backend}")
        np.save("y.npy", y)
        ```
        """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    assert run_page(page) == 0, capsys.readouterr().err
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), 2 * np.arange(10, dtype=np.float32))


def test_a_compile_error_points_into_the_page(tmp_path, capsys, monkeypatch):
    code, out = _run(tmp_path, """\
        ```python
        import dsl
        from dsl import In, Out, f32

        @dsl.kernel
        def bad(x: In[f32], y: Out[f32]):
            x.flat[0] = 1.0
        bad(__import__("numpy").ones(1, "float32"), __import__("numpy").ones(1, "float32"), backend="interpreter")
        ```
        """, capsys, monkeypatch)
    assert code == 1
    page = str((tmp_path / "page.md").resolve())
    assert "CompileError" in out.err and f"{page}:7" in out.err
