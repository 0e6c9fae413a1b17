#!/usr/bin/env python
"""Rewrite the STEP NAMES section of man/tracer.1 from tracer.steps.CATALOGUE (the one source of step names).

    python man/update_steps.py          # rewrite in place
    python man/update_steps.py --check  # exit 1 when the page is out of date (tests/test_man_page.py does this)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from tracer.steps import CATALOGUE, ROUTES  # noqa: E402

PAGE = HERE / "tracer.1"
START, END = ".SH STEP NAMES\n", ".SH TRACE FILE\n"

INTRO = r""".SH STEP NAMES
Step names are the public interface of a trace: users diff against them and porters write their
own dumps with them.
Layouts follow the attention code people port (\fI[batch, heads, q_len, d_head]\fR), not
TransformerLens's \fI[batch, pos, head, d_head]\fR.
\fI{i}\fR is a block index.
Size\-1 axes of \fBattn.mask\fR broadcast onto the scores.
.PP
The three routes record the same names where the quantity is the same.
An encoder (BERT, RoBERTa) records the block steps of a decoder with a bidirectional mask and
no \fBfinal_norm.out\fR, then its head: \fBhead.*\fR, \fBlogits\fR and \fBprobs\fR for a
masked\-LM head, or \fBpooled\fR without a head.
An encoder\-decoder model (T5, BART) prefixes every \fBembed.*\fR, \fBblocks.*\fR and
\fBfinal_norm.out\fR step with \fBencoder.\fR or \fBdecoder.\fR; the decoder's blocks add the
cross\-attention sublayer (\fBcross_attn.*\fR, keys and values from the encoder output);
\fBlogits\fR and \fBprobs\fR are over the decoder positions.
\fBtracer steps \-\-route encoder\-decoder\fR lists the concrete names of one route.
Marks after a description: (E) encoder route only, (ED) encoder\-decoder route only, (D) decoder route
only (the steps some decoder families add: q/k norms, soft\-capping, norms after each sublayer, OPT\-350m's
projections, mixture\-of\-experts routing).
.PP
\fBtracer generate \-\-save\fR records the prefill under these names and each decoding step
\fIt\fR under \fBdecode.\fR\fIt\fR\fB.\fR + the same names (\fBdecode.3.blocks.0.attn.scores\fR,
\fBdecode.3.logits\fR), where \fBpos\fR and \fBq_len\fR are 1 (the new position), except that the
cache steps hold the whole cache after appending the new position: \fBattn.v\fR and the keys the
scores read (\fBattn.k_rot\fR in rotary models, else \fBattn.k_norm\fR in models with a key norm,
else \fBattn.k\fR; the key steps before it hold the new position only) are \fI[batch, kv_heads, past + 1, d_head]\fR, and \fBattn.scores\fR,
\fBattn.mask\fR and \fBattn.weights\fR are the one new query row \fI[batch, heads, 1, past + 1]\fR.
In encoder\-decoder models the encoder steps appear in the prefill only, and \fBcross_attn.k\fR and
\fBcross_attn.v\fR of every step are the keys and values cached at step 0.
"""


def _escape(text: str) -> str:
    return text.replace("\\", "\\e").replace("-", "\\-")


def section() -> str:
    lines = [INTRO.rstrip("\n")]
    for doc in CATALOGUE:
        mark = ""
        if tuple(doc.routes) != ROUTES:
            mark = " (" + ", ".join({"encoder": "E", "encoder-decoder": "ED", "decoder": "D"}[r] for r in doc.routes) + ")"
        lines += [".TP", f".B {doc.template}", f"[{', '.join(doc.axes)}] \\(em {_escape(doc.what)}{mark}"]
    return "\n".join(lines) + "\n"


def updated(text: str) -> str:
    start, end = text.index(START), text.index(END)
    return text[:start] + section() + text[end:]


def main(argv: list[str]) -> int:
    text = PAGE.read_text(encoding="utf-8")
    new = updated(text)
    if "--check" in argv:
        if new != text:
            print("man/tracer.1: STEP NAMES is out of date; run python man/update_steps.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
