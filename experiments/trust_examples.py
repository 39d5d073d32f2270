"""Before and after, sentence by sentence: the failures issue 33 names, a dozen of each kind.

Translates fixed probe sentences (grouped by the failure they provoke: short UI strings,
loops, literal text, markup) through the one pipeline twice: as a fresh clone served them
before (no store, no repeat ban, literals as they are) and as it serves them now (the
`general` memory, the repeat ban, literals kept, HTML as HTML for the markup group). Prints a
Markdown table per group, written into docs/trustworthy-translations.md by hand-free copy:

    python experiments/trust_examples.py --stores data/stores > /tmp/examples.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROBES: dict[str, list[str]] = {
    "short UI strings": [
        "Cancel",
        "Hello!",
        "Save",
        "Open File",
        "Delete",
        "Settings",
        "Print preview",
        "Undo",
        "Close window",
        "Search",
        "Help",
        "Quit",
    ],
    "loops and everyday sentences": [
        "The weather is nice today, so we are going for a walk in the park.",
        "Take two tablets of ibuprofen every eight hours.",
        "The meeting is on March 3 at 3:30 pm.",
        "Thank you for your message, I will answer tomorrow.",
        "Please close all windows before you leave the office.",
        "The children played in the garden until it got dark.",
        "Click the button to save your changes.",
        "The file could not be saved because the disk is full.",
        "Your password must contain at least eight characters.",
        "We are sorry, but this page does not exist.",
        "The update will be installed when you restart the computer.",
        "Do you want to keep the changes you made to this document?",
    ],
    "literal text": [
        "Edit the file /etc/ragmt/config.yaml and restart the server.",
        "Please write to help@example.com if you have questions.",
        "Visit https://example.org/docs for more information.",
        "Could not open %s: permission denied.",
        "Deleted %1$d files from {folder}.",
        "Set $HOME to your home directory.",
        "Thank you! 😀",
        "The package costs 12.50 euros and weighs 3 kg.",
        "Copy ~/Documents/report.odt to the USB stick.",
        "Page %1 of %2",
        "Run ./configure and then make install.",
        "Great work, team 👍",
    ],
    "markup (format=html)": [
        "<b>Save</b> your changes before closing.",
        '<p>Read the <a href="https://example.org/guide">guide</a> first.</p>',
        "<p>Click <i>Open</i> to choose a file.</p>",
        "<li>Print the <b>current</b> page</li>",
        "<p>Tom &amp; Jerry are friends.</p>",
        "<h1>Settings</h1><p>Change the language here.</p>",
        "<p>Press <kbd>Ctrl</kbd>+<kbd>S</kbd> to save.</p>",
        "<p>Run <code>make install</code> as root.</p>",
        "<td>Delete the selected rows</td>",
        "<p>The file was <em>not</em> saved.</p>",
        "<span>Open the file</span> in the editor.",
        "<p>Close the window<br>and start again.</p>",
    ],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stores", type=Path, required=True, help="holds the general memory")
    args = ap.parse_args()

    from index_builder.retrieval.serving import retrieve_with, store_encoder
    from index_builder.store import load_retriever, open_store
    from models import pipeline
    from models.bundle import load_bundle
    from models.translator import DEFAULT_BUNDLE, DecodeOptions, Translator

    bundle = load_bundle(DEFAULT_BUNDLE)
    translator = Translator.from_loaded(bundle, "auto")
    store = open_store(args.stores / "general")
    retrieve = retrieve_with(
        translator, load_retriever(store, store_encoder(store.manifest, bundle, None))
    )
    before = DecodeOptions(block_repeats=0, keep_literals=False)
    for group, texts in PROBES.items():
        after = DecodeOptions(format="html") if "html" in group else DecodeOptions()
        old = pipeline.translate(translator, texts, before).outputs
        new = pipeline.translate(translator, texts, after, retrieve).outputs
        print(f"\n**{group}**\n\n| source | before | after |\n|---|---|---|")
        for t, o, n in zip(texts, old, new, strict=True):
            cells = [x.replace("|", "\\|") for x in (t, o.text, n.text)]
            print("| " + " | ".join(f"`{c}`" if "html" in group else c for c in cells) + " |")


if __name__ == "__main__":
    main()
