# The type stubs (edbatch.pyi, beside the module) name what the module has, and the docstrings
# read well in help().
import ast
import pathlib
import pydoc

import edbatch


def stub_names():
    path = pathlib.Path(edbatch.__file__).parent / "edbatch.pyi"
    assert path.exists(), path
    tree = ast.parse(path.read_text())
    names, members = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} | {
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
    return names, members


def test_stubs_match_the_module():
    names, members = stub_names()
    public = {n for n in dir(edbatch) if not n.startswith("_")}
    assert names == public
    for cls, stubbed in members.items():
        have = {n for n in dir(getattr(edbatch, cls)) if not n.startswith("_")}
        dunders = {n for n in stubbed if n.startswith("__") and n not in ("__init__",)}
        assert stubbed - {"__init__"} - dunders == have - {"mro"} or cls.endswith("Error"), (cls, stubbed, have)
        for d in dunders:
            assert hasattr(getattr(edbatch, cls), d), (cls, d)


def test_help_reads_well():
    text = pydoc.render_doc(edbatch.Trace, renderer=pydoc.plaintext)
    assert "with edbatch.Trace(engine) as t:" in text
    assert "backward" in text and "Gradients" in text
    for obj in (edbatch.Engine, edbatch.Cell, edbatch.Model, edbatch.Optimizer, edbatch.Expr, edbatch.affine):
        assert obj.__doc__ and len(obj.__doc__) > 40, obj
    assert "docs/python.md" in edbatch.__doc__
