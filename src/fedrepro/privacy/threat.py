"""Every epsilon a report shows names its adversary and privacy unit (issue 27): the one check.

Each paper's threat model is written once, in its privacy module: FedSC's `THREAT_NOTE`, DPZV's
`THREAT_NOTE` / `THREAT_SHORT` (from its `THREAT_MODELS`), SteFFLe's `THREAT_MODELS[...].short` (the report's
`units_note`). A caption, title or figure text that shows an epsilon must carry one of them; `missing`
says which of a table's or figure's texts fail. The tests run it on the report functions' output.
"""

from __future__ import annotations

import re

# an epsilon shown: the symbol, or "eps" / "epsilon" as a word or before "=" (not "epoch", not "steps")
_EPSILON = re.compile(r"ε|\beps(ilon)?\b|\beps[_=]|\beps\d", re.IGNORECASE)


_NO_EPSILON = re.compile(r"(ε|\beps)\s*=\s*(∞|inf\b)", re.IGNORECASE)  # not private: nothing to name


def shows_epsilon(text: str) -> bool:
    return bool(_EPSILON.search(_NO_EPSILON.sub("", text)))


def threat_texts() -> tuple[str, ...]:
    """The texts that name an epsilon's adversary and privacy unit, one set per paper."""
    from fedrepro.privacy import dpzv, fedsc, steffle

    return (
        fedsc.THREAT_NOTE,
        dpzv.THREAT_NOTE,
        dpzv.THREAT_SHORT,
        *(model.short for model in steffle.THREAT_MODELS.values()),
    )


def names_threat(text: str) -> bool:
    return any(tag in text for tag in threat_texts())


def missing(texts) -> bool:
    """True when the texts of one table or figure show an epsilon but none of them names its threat model."""
    texts = [str(t) for t in texts]
    return any(shows_epsilon(t) for t in texts) and not any(names_threat(t) for t in texts)


def figure_texts(fig) -> list[str]:
    """Every text a matplotlib figure shows: titles, figure texts, axis labels, tick labels and legends."""
    texts = [t.get_text() for t in fig.texts]
    if getattr(fig, "_suptitle", None) is not None:
        texts.append(fig._suptitle.get_text())
    for ax in fig.axes:
        texts += [ax.get_title(loc) for loc in ("left", "center", "right")]
        texts += [ax.get_xlabel(), ax.get_ylabel()]
        texts += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        texts += [t.get_text() for t in ax.texts]
        legend = ax.get_legend()
        if legend is not None:
            texts += [t.get_text() for t in legend.get_texts()] + [legend.get_title().get_text()]
    for legend in fig.legends:
        texts += [t.get_text() for t in legend.get_texts()]
    return [t for t in texts if t]
