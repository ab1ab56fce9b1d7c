"""The documentation matches the code: the published models' table, the links, the examples' imports.

`python tests/test_docs.py` rewrites the table of published models in docs/models.md from
`bilm.io.sources.published_models.PUBLISHED_MODELS`.
"""
import glob
import os
import re
import sys

from helpers import ROOT

MODELS_PAGE = os.path.join(ROOT, "docs", "models.md")
TABLE_START = ("<!-- The table below is generated from bilm.io.sources.published_models.PUBLISHED_MODELS: "
               "`python tests/test_docs.py` rewrites it. -->\n")
TABLE_END = "<!-- End of the generated table. -->\n"


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _pages():
    """README.md, CONTRIBUTING.md and every page under docs/, as paths."""
    return ([os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CONTRIBUTING.md")]
            + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))))


def published_models_table():
    """The Markdown table of every published name, one row per download (names that share one download
    share a row: ELMoForManyLangs' `efml:<code>` and `nlpl:<id>`, and any alias)."""
    from bilm.io.sources.published_models import PUBLISHED_MODELS

    rows = {}
    for name, model in PUBLISHED_MODELS.items():
        rows.setdefault(model.urls, []).append((name, model))
    lines = ["| name | model | files |", "| --- | --- | --- |"]
    for urls, models in rows.items():
        names = ", ".join(f"`{name}`" for name, _ in models)
        files = ", ".join(f"[`{url.rsplit('/', 1)[-1]}`]({url})" for url in urls)
        lines.append(f"| {names} | {models[0][1].description} | {files} |")
    return "\n".join(lines) + "\n"


def _split_models_page():
    """docs/models.md as (text before the table, the table, text after it)."""
    text = _read(MODELS_PAGE)
    assert text.count(TABLE_START) == 1 and text.count(TABLE_END) == 1, "docs/models.md lost its table's markers"
    before, rest = text.split(TABLE_START)
    table, after = rest.split(TABLE_END)
    return before + TABLE_START, table, TABLE_END + after


def test_the_models_table_lists_exactly_the_published_names():
    _, table, _ = _split_models_page()
    assert table == published_models_table(), (
        "docs/models.md's table differs from bilm.io.sources.published_models.PUBLISHED_MODELS: "
        "run `python tests/test_docs.py` to rewrite it")


def _slug(heading):
    """The anchor GitHub gives a heading."""
    heading = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


def _anchors(path):
    text = re.sub(r"```.*?```", "", _read(path), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def _links(path):
    """The relative links of a page: (target file, anchor or '')."""
    text = re.sub(r"```.*?```", "", _read(path), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        yield os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path, anchor


def test_every_relative_link_and_anchor_exists():
    broken = []
    for page in _pages():
        for target, anchor in _links(page):
            if not os.path.exists(target):
                broken.append(f"{os.path.relpath(page, ROOT)} -> {os.path.relpath(target, ROOT)}")
            elif anchor and target.endswith(".md") and anchor not in _anchors(target):
                broken.append(f"{os.path.relpath(page, ROOT)} -> {os.path.relpath(target, ROOT)}#{anchor}")
    assert broken == []


def test_the_readme_links_every_docs_page_and_stays_a_front_page():
    readme = os.path.join(ROOT, "README.md")
    linked = {target for target, _ in _links(readme)}
    for page in _pages()[1:]:
        assert page in linked, f"the README does not link {os.path.relpath(page, ROOT)}"
    assert len(_read(readme).splitlines()) < 250


def test_contributing_and_install_show_the_readmes_commands():
    readme = _read(os.path.join(ROOT, "README.md"))
    install, test = re.search(r"```bash\n(python -m pip install .*)\n(python -m pytest .*)\n```", readme).groups()
    assert re.search(rf"^{re.escape(install)}$", _read(os.path.join(ROOT, "docs", "install.md")), re.M)
    assert re.search(rf"^{re.escape(test)}$", _read(os.path.join(ROOT, "CONTRIBUTING.md")), re.M)



def test_the_docs_examples_use_only_the_public_surface():
    from test_public_surface import private_imports  # the README's blocks are checked there

    private = [line for page in _pages()[1:]
               for i, code in enumerate(re.findall(r"```python\n(.*?)```", _read(page), flags=re.S))
               for line in private_imports(f"{os.path.relpath(page, ROOT)} block {i}", code)]
    assert private == []


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    before, _, after = _split_models_page()
    with open(MODELS_PAGE + ".tmp", "w", encoding="utf-8") as f:  # whole or not at all
        f.write(before + published_models_table() + after)
    os.replace(MODELS_PAGE + ".tmp", MODELS_PAGE)
    print(f"rewrote the table of {MODELS_PAGE}")
