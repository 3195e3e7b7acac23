"""Records are untrusted input: each hostile record is refused, naming its file and field, or
built and inert (sitebuild/records.py's contract, sitebuild/output_blocks.py's escaping).

"Inert" is checked twice: in the HTML that Python-Markdown makes of a page with the site's
own extensions (every attack on its own, fast), and in Chromium, on the pages of a copy of
the project built with the attacks that pass the contract, beside a fixture snippet whose own
output carries them (``hostile_records`` in tests/test_bad_input.py).
"""

import json
from html.parser import HTMLParser
from pathlib import Path

import markdown
import pytest
from mkdocs.config import load_config

from sitebuild import output_blocks, records, snippets
from tests.conftest import ROOT, background
from tests.test_bad_input import build_with, copy_for, fault
from tests.test_browser import browser, serve  # noqa: F401 (browser: a fixture)

PATH = "snippets/pytorch/nn.py"  # a snippet with an output line in both languages
MACHINE = {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "python": "3.12.3", "cuda": "13.0",
           "driver": "580.95.05", "gpus": ["NVIDIA H200"], "cpu": "Intel(R) Xeon(R)", "os": "Linux"}
# Each tries to make an element with id pwn-N, an on* handler or a javascript: link.
SCRIPT = '<script id="pwn-1">alert(1)</script>'
IMG = '<img src=x id="pwn-2" onerror="alert(2)">'
ATTR_LIST = '{: onclick="alert(3)" id="pwn-3" }'
LINK = "[x](javascript:alert(4))"
COMMENT = "<!-- the rest of the page disappears"
OUTPUTS = {  # what a snippet printed, as an attacker would write it: every line must show as text
    "script and handler": f"ok\n{SCRIPT}\n{IMG}\n",
    "3 backticks": f"ok\n```\n{IMG}\n```\n",
    "4 backticks": f"ok\n````\n{IMG}\n````\n",
    "10 backticks": f"ok\n``````````\n{SCRIPT}\n``````````\n",
    "tildes": f"ok\n~~~\n{IMG}\n~~~~~~~~\n",
    "comment opener": f"ok\n{COMMENT}\n{IMG}\n",
    "attr_list line": f"ok\n{ATTR_LIST}\n",
    "javascript link": f"ok\n{LINK}\n",
    "snippet include": f'ok\n--8<-- "README.md"\n',
}
LABELS = {  # machine fields that pass the contract and must stay text in labels, lines and cells
    'a " in a label': 'GPU" onmouseover="alert(5)',
    "inline markup": f"GPU *a* _b_ {LINK} {ATTR_LIST}",
    "an entity": "GPU &lt;script&gt;",
}
REFUSED = {  # (where, value) -> the phrase the refusal names
    "script in device": (("machine", "device"), SCRIPT, "machine: 'device' holds one of < > ` |"),
    "handler in torch": (("machine", "torch"), IMG, "machine: 'torch' holds one of < > ` |"),
    "backticks in cuda": (("machine", "cuda"), "13.0 ```", "machine: 'cuda' holds one of < > ` |"),
    "| in driver": (("machine", "driver"), "580 | x", "machine: 'driver' holds one of < > ` |"),
    "script in python": (("machine", "python"), SCRIPT, "machine: 'python' holds one of"),
    "script in cpu": (("machine", "cpu"), SCRIPT, "machine: 'cpu' holds one of"),
    "script in os": (("machine", "os"), SCRIPT, "machine: 'os' holds one of"),
    "script in gpus": (("machine", "gpus"), [SCRIPT], "machine: 'gpus' holds one of"),
    "NUL in device": (("machine", "device"), "GPU\0", "machine: 'device' holds a control or formatting character"),
    "newline in device": (("machine", "device"), "GPU\n=== x", "machine: 'device' holds a control"),
    "bidi override in device": (("machine", "device"), "GPU \u202egnp.exe", "machine: 'device' holds a control"),
    "long device": (("machine", "device"), "G" * 500, "machine: 'device' is longer than 200 characters"),
    "NUL in stdout": (("entry", "stdout"), "ok\0", f"{PATH}: 'stdout' holds a control or formatting character"),
    "bidi override in stderr": (("entry", "stderr_tail"), "x\u202ey", f"{PATH}: 'stderr_tail' holds a control"),
    "figure up the tree": (("entry", "figures"), ["../../docs/index.md"], "figure '../../docs/index.md' is not a plain"),
    "figure through a folder": (("entry", "figures"), ["x.svg/../../y"], "figure 'x.svg/../../y' is not a plain"),
    "attribution past the output": (("entry", "sections"), [["x", 99]], f"{PATH}: 'sections' is not a list"),
    "date with a newline": (("recorded",), "2026-12-03\n", "'recorded' is not a YYYY-MM-DD date"),
    "snippet outside snippets/": (("snippet",), "../docs/index.md", "snippet '../docs/index.md': not a plain relative path"),
    "source with a backtick": (("source",), "snippets/`x`.py", "source 'snippets/`x`.py' is not a plain relative path"),
}


def entry(stdout="ok\n", returncode=0, stderr_tail=""):
    return {"returncode": returncode, "stdout": stdout, "stderr_tail": stderr_tail, "seconds": 1.0,
            "sources": snippets.source_hashes(ROOT / PATH), "figures": []}


def data(machine=MACHINE, **entries) -> dict:
    return {"machine": machine, "recorded": "2026-12-03", "snippets": entries or {PATH: entry()}}


def write(folder: Path, record: dict, text: str | bytes | None = None) -> Path:
    device = record["machine"]["device"]
    name = records.slug(device, "2026-12-03") if len(device) <= records.FIELD_LIMIT else "long"  # what read() expects
    file = folder / f"{name}.json"
    content = text if text is not None else json.dumps(record, ensure_ascii=False)
    file.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    return file


def hostile(where: tuple, value) -> dict:
    record = data()
    if where[0] == "machine":
        record["machine"] = {**MACHINE, where[1]: value}
    elif where[0] == "entry":
        record["snippets"][PATH][where[1]] = value
    elif where[0] == "recorded":
        record["recorded"] = value
    elif where[0] == "snippet":
        record["snippets"] = {value: entry()}
    else:
        record["snippets"][PATH]["sources"][value] = "0" * 64
    return record


@pytest.mark.parametrize("case", REFUSED)
def test_a_hostile_record_is_refused_naming_its_file_and_field(tmp_path, case):
    where, value, phrase = REFUSED[case]
    file = write(tmp_path, hostile(where, value))
    with pytest.raises(records.RecordError) as refused:
        records.read(file)
    assert str(refused.value).startswith(f"{file.name}: ") and phrase in str(refused.value)


def test_invalid_utf8_and_a_huge_record_are_refused_before_they_are_read(tmp_path):
    bad = write(tmp_path, data(), text=json.dumps(data()).encode().replace(b"ok", b"o\xff"))
    with pytest.raises(records.RecordError, match=rf"^{bad.name}: not valid JSON"):
        records.read(bad)
    huge = write(tmp_path, data(**{PATH: entry(stdout="x" * 50_000_000)}))
    with pytest.raises(records.RecordError, match=rf"^{huge.name}: larger than 4 MB"):
        records.read(huge)
    big = write(tmp_path, data(**{PATH: entry(stdout="x" * 100_000)}))
    with pytest.raises(records.RecordError, match=rf"^{big.name}: {PATH}: 'stdout' is larger than 64 KB"):
        records.read(big)


def test_adding_a_record_copies_only_its_own_figures(tmp_path):
    """`records add` copies the figures the record names, never a link or another file."""
    made = tmp_path / "made"
    made.mkdir()
    record = data(**{PATH: {**entry(), "figures": ["loss.svg", "link.svg"]}})
    file = write(made, record)
    page = file.with_suffix("") / "pytorch" / "nn"
    page.mkdir(parents=True)
    (page / "loss.svg").write_text("<svg/>")
    (page / "link.svg").symlink_to(ROOT / "README.md")
    (page / "other.md").write_text("not named by the record")
    kept = tmp_path / "kept"
    records.add(file, kept)
    copied = sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*") if p.is_file())
    assert copied == [f"{file.stem}.json", f"{file.stem}/pytorch/nn/loss.svg"]


class Elements(HTMLParser):
    """What a page would run or hide: injected elements, handlers, javascript: links, comments."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found, self.text = [], []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name.startswith("on") or (name == "id" and (value or "").startswith("pwn")) or \
                    (name in ("href", "src") and (value or "").strip().lower().startswith("javascript:")):
                self.found.append(f"<{tag} {name}={value!r}>")
        if tag in ("script", "img", "iframe", "object"):
            self.found.append(f"<{tag}>")

    def handle_comment(self, data):
        self.found.append(f"<!--{data[:40]}")

    def handle_data(self, data):
        self.text.append(data)


def problems(html: str) -> tuple[list[str], str]:
    parser = Elements()
    parser.feed(html)
    return parser.found, "".join(parser.text)


@pytest.fixture(scope="module")
def render():
    """A page's Markdown as the site renders it: mkdocs.yml's extensions, the output blocks in
    ``lang``, with ``recs`` as the records and ``stdout`` as this build's own output."""
    config = load_config(str(ROOT / "mkdocs.yml"))

    def rendered(text: str, recs: list[records.Record], stdout: str, lang: str, monkeypatch) -> str:
        ours = snippets.Result(PATH, 0, stdout, "", 1.0, 120, {"device": "cpu: Test", "torch": "2.13.0+cpu",
                                                               "python": "3.11.7"})
        monkeypatch.setattr(output_blocks, "records_now", lambda: recs)
        monkeypatch.setattr(output_blocks, "result", lambda path: ours)
        monkeypatch.setattr(snippets, "discover", lambda: [ROOT / PATH])
        configs = {**config.mdx_configs, "sitebuild.output_blocks": {"language": lang}}
        return markdown.markdown(text, extensions=config.markdown_extensions, extension_configs=configs)
    return rendered


def shown(tmp_path, record: dict) -> list[records.Record]:
    return [records.read(write(tmp_path, record))]  # through the contract, as the build reads it


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("case", OUTPUTS)
def test_an_output_shows_as_text_in_a_record_tab_a_failure_and_the_build_s_own_block(
        tmp_path, render, monkeypatch, case, lang):
    payload = OUTPUTS[case]
    recs = shown(tmp_path, data(**{PATH: entry(stdout=payload)})) + shown(
        tmp_path, data({**MACHINE, "device": "GPU B"}, **{PATH: entry(returncode=1, stderr_tail=payload)}))
    html = render(f"Before.\n\n<!-- output: {PATH} -->\n\nAfter.\n", recs, payload, lang, monkeypatch)
    found, text = problems(html)
    assert found == [], f"{case}: live markup {found}"
    assert text.count(payload.strip()) == 3, f"{case}: the payload is not shown verbatim in all three blocks"
    assert text.rstrip().endswith("After."), f"{case}: the page after the output is swallowed"


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("case", LABELS)
def test_a_machine_field_stays_text_in_tab_labels_provenance_lines_and_the_matrix(
        tmp_path, render, monkeypatch, case, lang):
    device = LABELS[case]
    recs = shown(tmp_path, data({**MACHINE, "device": device, "torch": device}))
    page = f"<!-- output: {PATH} -->\n\n{output_blocks.PROVENANCE_LINE}\n\nAfter.\n"
    found, text = problems(render(page, recs, "ok\n", lang, monkeypatch))
    assert found == [], f"{case}: live markup {found}"
    label = output_blocks.LABELS[lang]["recorded"]
    assert f"{device} · 2026-12-03" in text, "the tab label"
    assert f"{label} {device} · torch {device}" in text, "the provenance line"
    assert text.count(f"{device} · 2026-12-03") == 2, "the tab label and the matrix's column"
    assert text.rstrip().endswith("After.")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("case", LABELS)
def test_a_stale_entry_stays_text_in_its_label_note_and_output(tmp_path, render, monkeypatch, case, lang):
    """The stale tab wraps the device in emphasis and links each changed file: neither may let
    a machine field or an output out of its text."""
    monkeypatch.setenv("REPO_URL", "https://github.com/owner/site")
    device, payload = LABELS[case], "".join(OUTPUTS.values())
    stale = {**entry(stdout=payload), "sources": {PATH: "0" * 64, "snippets/gone.py": "0" * 64}}
    recs = shown(tmp_path, data({**MACHINE, "device": device}, **{PATH: stale}))
    found, text = problems(render(f"<!-- output: {PATH} -->\n\nAfter.\n", recs, "ok\n", lang, monkeypatch))
    labels = output_blocks.LABELS[lang]
    assert found == [], f"{case}: live markup {found}"
    assert f"{device} · 2026-12-03 · {labels['earlier']}" in text and payload.strip() in text
    assert labels["earlier_note"].format(day="2026-12-03", files=f"{PATH}, snippets/gone.py") in text
    assert text.rstrip().endswith("After.")


def test_todays_labels_are_written_as_they_were():
    """Plain text needs no escape: today's records keep their Markdown, and so their HTML."""
    for rec in records.load():
        assert output_blocks.record_label(rec) == f"{rec.machine['device']} · {rec.recorded}"


# --- the same attacks in a built copy, in Chromium ------------------------------------------

PAGES = ["pytorch/nn/", "zh/pytorch/nn/", "provenance/", "zh/provenance/"]
FIXTURE = "snippets/hostile/prints_markup.py"  # the build's own output, printing every attack


@fault  # built beside the faults, once the session's site is: it must build, and be inert
def hostile_records(project: Path):
    """A record that passes the contract with every attack it allows, a failed entry whose
    stderr carries them, and a snippet of the copy's own that prints them, on the nn page."""
    payload, failing = "".join(OUTPUTS.values()), "snippets/pytorch/optim.py"
    machine = {**MACHINE, "device": " ".join(LABELS.values()), "torch": LABELS["inline markup"]}
    write(project / "records", data(machine, **{  # the copy's snippets are this checkout's
        PATH: entry(stdout=payload),
        failing: {**entry(returncode=1, stderr_tail=payload), "sources": snippets.source_hashes(ROOT / failing)}}))
    (project / FIXTURE).parent.mkdir()
    (project / FIXTURE).write_text(f"print({payload!r}, end='')\n", encoding="utf-8")
    for page in ("nn.md", "nn.zh.md"):
        doc = project / "docs" / "pytorch" / page
        doc.write_text(doc.read_text(encoding="utf-8") + f"\n<!-- output: {FIXTURE} -->\n", encoding="utf-8")


INERT = """() => ({
  pwned: document.querySelectorAll('[id^="pwn"]').length,
  handlers: [...document.querySelectorAll('main *')].flatMap(e => [...e.attributes])
              .filter(a => a.name.startsWith('on')).map(a => a.name),
  javascript: document.querySelectorAll('a[href^="javascript:"]').length,
  text: document.querySelector('main').innerText,
})"""


@pytest.fixture(scope="module")
def hostile_site(site):
    proc = background("fault hostile_records", build_with, "hostile_records", copy_for(site, "hostile_records")).result()
    assert proc.returncode == 0, f"the copy with hostile records did not build:\n{proc.stderr[-3000:]}"
    return copy_for(site, "hostile_records") / "site"


@pytest.mark.parametrize("page", PAGES)
def test_hostile_records_are_inert_in_chromium(hostile_site, browser, page):
    context = browser.new_context()
    tab, dialogs, errors = context.new_page(), [], []
    tab.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    tab.on("console", lambda message: message.type == "error" and errors.append(message.text))
    tab.goto(serve(hostile_site) + page, wait_until="networkidle")
    tab.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")  # the whole output, folded
    for label in tab.locator(".tabbed-labels label").all():  # show every record's tab, as a reader would
        label.click()
    found = tab.evaluate(INERT)
    context.close()
    assert dialogs == [] and found["pwned"] == 0 and found["handlers"] == [] and found["javascript"] == 0, found
    assert errors == []
    if "nn/" in page:
        for line in (SCRIPT, IMG, ATTR_LIST, LINK, COMMENT, "``````````"):
            assert line in found["text"], f"{line!r} is not shown as text on {page}"
