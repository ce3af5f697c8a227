"""Streaming detokenization and stop-string handling.

Tokens arrive as byte pieces; text is released only once it is valid UTF-8
and cannot be the beginning of a stop string.
"""

from __future__ import annotations

import codecs


class TextAssembler:
    def __init__(self, stop: list[str] | None) -> None:
        self.stop = [s for s in (stop or []) if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._text = ""        # all decoded text so far
        self._released = 0     # how much of it was handed out
        self.stopped = False

    def feed(self, piece: bytes) -> str:
        """Add one token's bytes; return the text that is now safe to show."""
        if self.stopped:
            return ""
        self._text += self._decoder.decode(piece)
        for s in self.stop:
            # search from just before the unreleased part: a stop string may straddle pieces
            at = self._text.find(s, max(0, self._released - len(s) + 1))
            if at >= 0:
                self.stopped = True
                self._text = self._text[:at]
                return self._release(len(self._text))
        return self._release(len(self._text) - self._held_back())

    def finish(self) -> str:
        """End of generation: flush everything that is left (no stop string matched)."""
        if not self.stopped:
            self._text += self._decoder.decode(b"", final=True)
        return self._release(len(self._text))

    @property
    def text(self) -> str:
        return self._text

    def _held_back(self) -> int:
        """Length of the longest tail that is a proper prefix of some stop string."""
        best = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(self._text)), best, -1):
                if self._text.endswith(s[:n]):
                    best = n
                    break
        return best

    def _release(self, upto: int) -> str:
        upto = max(upto, self._released)
        out = self._text[self._released:upto]
        self._released = upto
        return out


def cut_at_stops(tokens: list[int], piece, stops) -> list[int]:
    """The tokens before the one in which the first stop string begins (all of them where none occurs).
    piece(token) -> bytes. A stop string may span several tokens ("<|", "im", "_end", "|>"); the match is
    the generation loop's own (TextAssembler): pymtp graft cuts the replies and user turns it generates
    with it."""
    if not stops:
        return list(tokens)
    text = TextAssembler(stops)
    ends = []  # the decoded text's length after each token
    for t in tokens:
        text.feed(piece(int(t)))
        if text.stopped:  # the text now ends where the stop string began
            return [t for t, end in zip(tokens, ends) if end <= len(text.text)]
        ends.append(len(text.text))
    return list(tokens)
