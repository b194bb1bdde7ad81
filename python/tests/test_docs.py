# The docs' code blocks, run (docs/README.md, "How the pages are kept true"): every ```python block
# of README.md and docs/*.md in a fresh interpreter, and every ```sh block's commands. edb-run,
# edb-cache, python3 and the built doc snippets run as written, in a scratch directory that links
# to the repository's folders (docs/ copied), with the build's tools on PATH and a kernel cache of
# their own; a command that renders with graphviz skips when `dot` is missing. Commands that take
# minutes or set machines up (scripts/, bench/*.sh, cmake) are what CI and the benchmark runs
# execute: here a script must exist and be executable, any other build/ program must list every
# --flag given to it in its --help, and a cmake -D option must be one the build reads. The ```cpp
# blocks are docs/snippets, compiled and run by ctest (edb-check-guide holds the pages to them).
# Then the reference pages against the code: every flag of edb-run and edb-cache, every policy,
# executor and Engine option is named where the docs say it is, and nothing else; and every file
# path the pages name exists.
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, WAIT_SECONDS, build_dir

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def blocks(language):
    found = []
    for page in PAGES:
        for match in re.finditer(rf"^```{language}\n(.*?)^```", page.read_text(), flags=re.S | re.M):
            line = page.read_text()[: match.start()].count("\n") + 1
            found.append(pytest.param(match.group(1), id=f"{page.name}:{line}"))
    return found


PYTHON_BLOCKS = blocks("python")
SH_BLOCKS = blocks("sh")


def test_the_docs_have_examples():
    assert len(PYTHON_BLOCKS) >= 7 and len(SH_BLOCKS) >= 5


@pytest.mark.parametrize("code", PYTHON_BLOCKS)
def test_python_block(code, tmp_path):
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=os.environ, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, f"{code}\n{result.stderr}"


def commands(block):
    """The block's commands: continuation lines joined, comments and blank lines dropped."""
    text = block.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out


def cmake_variables():
    files = [REPO / "CMakeLists.txt", *(REPO / "cmake").glob("*.cmake"), *REPO.glob("*/CMakeLists.txt")]
    return "\n".join(f.read_text() for f in files)


def scratch(tmp_path):
    """A directory that links to the repository's folders and the build, so relative paths work;
    docs/ is a copy, since a command may write there (the guide's schedule picture)."""
    shutil.copytree(REPO / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("snippets"))
    for entry in REPO.iterdir():
        if entry.name not in (".git", "build") and not (tmp_path / entry.name).exists():
            (tmp_path / entry.name).symlink_to(entry)
    if not (tmp_path / "build").exists():
        (tmp_path / "build").symlink_to(build_dir())
    return tmp_path


@pytest.mark.parametrize("block", SH_BLOCKS)
def test_sh_block(block, tmp_path):
    cwd = scratch(tmp_path)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(build_dir() / "tools"), env.get("PATH", "")])
    env["EDB_CACHE_DIR"] = str(tmp_path / "kernel-cache")
    skipped = []
    for words in commands(block):
        assignments = {}
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            name, value = words.pop(0).split("=", 1)
            assignments[name] = value.replace("build/", f"{build_dir()}/", 1) if value.startswith("build/") else value
        program = words[0]
        renders = [w for w in words if w.endswith((".svg", ".png", ".pdf"))]
        if renders and shutil.which("dot") is None:
            skipped.append(f"{' '.join(words)} (renders with graphviz's dot, not installed)")
            continue
        if program in ("edb-run", "edb-cache", "python3") or program.startswith(("build/tools/", "build/docs/edb_snippet_")):
            argv = [sys.executable, *words[1:]] if program == "python3" else words
            result = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=600,
                                    env={**env, **assignments})
            assert result.returncode == 0, f"{' '.join(words)}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
        elif program.startswith(("./scripts/", "scripts/", "bench/")) and program.endswith(".sh"):
            path = REPO / program.removeprefix("./")
            assert path.exists() and os.access(path, os.X_OK), f"{program}: no such executable script"
        elif program.startswith("build/"):
            path = build_dir() / program.removeprefix("build/")
            assert path.exists(), f"{program} is not built in {build_dir()}"
            help_text = subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=60)
            usage = help_text.stdout + help_text.stderr
            for flag in (w.split("=", 1)[0] for w in words[1:] if w.startswith("--")):
                assert flag in usage, f"{program} --help does not list {flag}"
        elif program == "perf":
            # A profile of one of our programs: perf may be missing, so the program is not run, but
            # it must be built and take the flags given; `perf report` reads only perf's own data.
            profiled = [i for i, w in enumerate(words) if w == "edb-run" or w.startswith("build/")]
            assert words[1] == "report" or profiled, f"perf profiles none of our programs: {' '.join(words)}"
            if profiled:
                name = words[profiled[0]]
                path = build_dir() / ("tools/edb-run" if name == "edb-run" else name.removeprefix("build/"))
                assert path.exists(), f"{name} is not built in {build_dir()}"
                usage = subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=60)
                for flag in (w.split("=", 1)[0] for w in words[profiled[0] + 1:] if w.startswith("--")):
                    assert flag in usage.stdout + usage.stderr, f"{name} --help does not list {flag}"
        elif program == "mpirun":
            # A run across ranks (docs/training.md) needs Open MPI and often other machines, so it is
            # not run here: the edb-run it starts must be built and take the flags given to it.
            started = [i for i, w in enumerate(words) if w == "edb-run" or w.startswith("build/")]
            assert started, f"mpirun starts none of our programs: {' '.join(words)}"
            name = words[started[0]]
            path = build_dir() / ("tools/edb-run" if name == "edb-run" else name.removeprefix("build/"))
            assert path.exists(), f"{name} is not built in {build_dir()}"
            usage = subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=60)
            for flag in (w.split("=", 1)[0] for w in words[started[0] + 1:] if w.startswith("--")):
                assert flag in usage.stdout + usage.stderr, f"{name} --help does not list {flag}"
        elif program == "cmake":
            known = cmake_variables()
            for option in (w for w in words if w.startswith("-D")):
                name = option[2:].split("=", 1)[0].split(":", 1)[0]
                assert name.startswith("CMAKE_") or name in known, f"cmake option {name} is read nowhere"
        else:
            pytest.fail(f"a docs command this test neither runs nor checks: {' '.join(words)}")
    if skipped:
        pytest.skip("; ".join(skipped))


def test_another_interpreter_is_told_which_one_the_module_is_for(tmp_path):
    # What the README promises: build/python/edbatch.py, which only an interpreter the compiled
    # module does not match imports, names both interpreters and the CMake option.
    shim = build_dir() / "python" / "edbatch.py"
    code = ("import runpy, sys\n"
            "sys.version_info = (2, 7, 0)\n"
            f"runpy.run_path({str(shim)!r})\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                            timeout=WAIT_SECONDS)
    assert result.returncode != 0
    assert "ImportError: edbatch: the module here was built for Python 3." in result.stderr
    assert "this is Python 2.7" in result.stderr and "-DPython_EXECUTABLE=" in result.stderr


# mpirun's own flags, which docs/training.md gives before edb-run.
MPIRUN_FLAGS = {"--oversubscribe", "--allow-run-as-root", "--hostfile"}


def flags_in(text):
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]", text)) - MPIRUN_FLAGS


@pytest.mark.parametrize("tool, pages", [("edb-run", ["edb-run.md", "training.md"]), ("edb-cache", ["edb-run.md"])])
def test_the_tool_pages_name_every_flag(tool, pages):
    # docs/edb-run.md (and training.md) against the tools' own --help: every flag documented, and
    # no flag documented that the tools do not have.
    helps = {name: subprocess.run([str(build_dir() / "tools" / name), "--help"], capture_output=True, text=True,
                                  timeout=60).stdout for name in ("edb-run", "edb-cache")}
    documented = set().union(*(flags_in((REPO / "docs" / page).read_text()) for page in pages))
    missing = flags_in(helps[tool]) - documented
    assert not missing, f"{tool} --help has flags that {', '.join(pages)} do not mention: {sorted(missing)}"
    unknown = documented - flags_in(helps["edb-run"]) - flags_in(helps["edb-cache"])
    assert not unknown, f"{', '.join(pages)} mention flags that neither tool has: {sorted(unknown)}"


def test_the_pages_name_every_policy_executor_and_engine_option():
    # docs/python.md, policies.md and edb-run.md against the module: every EngineOptions field and
    # every policy and executor the engine accepts (its own error message lists them).
    import edbatch

    def available(**option):
        with pytest.raises(edbatch.UsageError) as error:
            edbatch.Engine(**option)
        return re.search(r"\(available: ([^)]*)\)", str(error.value)).group(1).split(", ")

    policies, executors = available(policy="?"), available(executor="?")
    python_md = (REPO / "docs" / "python.md").read_text()
    for page in ("python.md", "policies.md", "edb-run.md"):
        text = (REPO / "docs" / page).read_text()
        names = policies if page == "policies.md" else policies + executors
        missing = [name for name in names if f"`{name}`" not in text]
        assert not missing, f"{page} does not name {missing}"
    missing = [key for key in edbatch.Engine().options if f"`{key}`" not in python_md]
    assert not missing, f"python.md does not name the Engine options {missing}"


def test_the_pages_name_only_files_that_exist():
    # A path such as runtime/driver.cpp named in README.md or docs/ must exist (LAYOUT.md has
    # check_layout.sh), so pages stay true when files move.
    path = re.compile(r"(?<![\w./-])((?:ir|scheduler|memplan|jit|nvrtc|runtime|trace|samples|tools|bench|tests|python|"
                      r"docs|scripts|include|cmake|examples)/[\w./-]*\w\.(?:h|cpp|def|py|pyi|sh|cmake|md|txt|svg|in))\b")
    gone = [f"{page.name}:{number}: {match}" for page in PAGES
            for number, line in enumerate(page.read_text().splitlines(), 1)
            for match in path.findall(line) if not (REPO / match).exists() and not (REPO / "docs" / match).exists()]
    assert not gone, "files named in the docs that do not exist:\n" + "\n".join(gone)
