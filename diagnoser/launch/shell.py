"""A shell lexer: words and operators as `sh` would split them, expanding nothing.

Linear in the input: each character is looked at a bounded number of times (runs of plain characters and
quoted strings are taken with one regex match or `str.find` from the current position, never by slicing the
rest of the text), so a 12 MB one-line script with a million arguments is read in seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from diagnoser.errors import InputError
from diagnoser.lazyre import lazy


class LaunchFileError(InputError):
    """The file cannot be read or is not valid input (exit code 2); the message names no path."""


#: Words (and operators) a launch file may hold: real launch scripts have hundreds; a file with more is
#: refused in about a second rather than planned for minutes.
MAX_WORDS = 50_000


def too_many_words(line: int, what: str = "shell words") -> LaunchFileError:
    """The error for a launch over MAX_WORDS (shell text, or an exec-form / YAML list of words)."""
    return LaunchFileError(f"line {line}: more than {MAX_WORDS:,} {what}; this is not a launch script the planner "
                           "reads (split it, or pass the command itself)")


@dataclass
class Word:
    """One shell word (or operator) with the line it starts on."""

    text: str
    line: int
    raw: str = ""
    dynamic: bool = False          # holds an expansion the shell would make ($VAR, $(cmd), `cmd`)
    op: bool = False
    cut: int | None = None         # newline op: a comment on this line ended a continued command


#: A run of characters with no meaning to the shell (inside or at the start of a word).
_PLAIN = lazy(r"[^ \t\r\n\\'\"$`<>&;|()]+")
_REDIRECT = lazy(r"&>>?|<<<|<<-|<<|<>|<&|>>|>&|>\||<|>")
_FD_DUP = lazy(r"[ \t]*(\d+-?|-)")
_NAME_CHARS = lazy(r"\w+")


class ShellLexer:
    """One pass over shell text; `words()` returns its words and control operators.

    State that the shell keeps between characters (the word being built, a pending redirection target or
    heredoc delimiter, whether the line was continued) lives on the instance, one method per construct.
    """

    def __init__(self, text: str, first_line: int = 1) -> None:
        self.text = text
        self.n = len(text)
        self.i = 0
        self.line = first_line
        self.out: list[Word] = []
        self.buf: list[str] = []
        self.start = 0
        self.start_line = first_line
        self.dynamic = False
        self.in_word = False
        self.drop_next = False                  # the next word is a redirection target
        self.heredocs: list[tuple[str, bool]] = []
        self.pending_heredoc: bool | None = None  # the next word is a heredoc delimiter (value: strip tabs)
        self.continued = False                  # the last line break was a backslash continuation
        self.since_op = False                   # a word was emitted since the last operator
        self.cut_line: int | None = None

    # -- words and operators ------------------------------------------------------------------------------------

    def finish(self) -> None:
        if not self.in_word:
            return
        word = "".join(self.buf)
        if self.pending_heredoc is not None:
            self.heredocs.append((word, self.pending_heredoc))
            self.pending_heredoc = None
        elif self.drop_next:
            self.drop_next = False
        else:
            self.out.append(Word(word, self.start_line, self.text[self.start:self.i], self.dynamic))
            self.since_op = True
            if len(self.out) > MAX_WORDS:
                raise too_many_words(self.line)
        self.buf = []
        self.in_word = False
        self.dynamic = False

    def begin(self) -> None:
        if not self.in_word:
            self.in_word = True
            self.start = self.i
            self.start_line = self.line

    def op(self, sym: str) -> None:
        self.out.append(Word(sym, self.line, sym, op=True))
        self.since_op = False

    # -- constructs ---------------------------------------------------------------------------------------------

    def skip_balanced(self, j: int, open_c: str, close_c: str) -> int:
        """Index after the bracket that closes the one opened just before j."""
        text, n = self.text, self.n
        depth = 1
        while j < n and depth:
            c = text[j]
            if c == "\\":
                j += 2
                continue
            if c == "\n":
                self.line += 1
            elif c in "'\"":
                end = text.find(c, j + 1)
                if end < 0:
                    return n
                self.line += text.count("\n", j, end)
                j = end
            elif c == open_c:
                depth += 1
            elif c == close_c:
                depth -= 1
            j += 1
        return j

    def dollar(self, j: int) -> int:
        """Consume an expansion starting at text[j] == '$'; returns the index after it (appends it to buf)."""
        text, n = self.text, self.n
        k = j + 1
        if k < n and text[k] == "(":
            k = self.skip_balanced(k + 1, "(", ")")
        elif k < n and text[k] == "{":
            k = self.skip_balanced(k + 1, "{", "}")
        elif k < n and (text[k].isalnum() or text[k] == "_"):
            k = _NAME_CHARS.match(text, k).end()  # type: ignore[union-attr]
        elif k < n and text[k] in "@*#?!$-":
            k += 1
        else:
            self.buf.append("$")
            return k
        self.buf.append(text[j:k])
        self.dynamic = True
        return k

    def newline(self) -> None:
        self.finish()
        self.out.append(Word("\n", self.line, "\n", op=True, cut=self.cut_line))
        self.since_op = False
        self.cut_line = None
        self.continued = False
        self.i += 1
        self.line += 1
        text, n = self.text, self.n
        for delim, strip_tabs in self.heredocs:
            while self.i < n:
                end = text.find("\n", self.i)
                body = text[self.i:] if end < 0 else text[self.i:end]
                self.i = n if end < 0 else end + 1
                self.line += 1
                if (body.lstrip("\t") if strip_tabs else body) == delim:
                    break
        self.heredocs = []

    def single_quoted(self) -> bool:
        """'...': literal text. False when unterminated."""
        self.begin()
        end = self.text.find("'", self.i + 1)
        if end < 0:
            return False
        self.buf.append(self.text[self.i + 1:end])
        self.line += self.text.count("\n", self.i, end)
        self.i = end + 1
        return True

    def ansi_c_quoted(self) -> None:
        """$'...': backslash escapes decoded."""
        self.begin()
        text, n = self.text, self.n
        end = self.i + 2
        while end < n and text[end] != "'":
            end += 2 if text[end] == "\\" else 1
        self.buf.append(text[self.i + 2:end].encode("utf-8").decode("unicode_escape", errors="replace"))
        self.line += text.count("\n", self.i, end)
        self.i = end + 1

    def double_quoted(self) -> bool:
        """"...": $ and ` expand (marked dynamic), backslash escapes only "\\$`. False when unterminated."""
        self.begin()
        text, n, buf = self.text, self.n, self.buf
        j = self.i + 1
        while j < n and text[j] != '"':
            ch = text[j]
            if ch == "\\" and j + 1 < n:
                nxt = text[j + 1]
                if nxt == "\n":
                    self.line += 1
                elif nxt in '"\\$`':
                    buf.append(nxt)
                else:
                    buf.append("\\" + nxt)
                j += 2
                continue
            if ch == "$":
                j = self.dollar(j)
                continue
            if ch == "`":
                j = self.backquoted(j)
                continue
            if ch == "\n":
                self.line += 1
            buf.append(ch)
            j += 1
        if j >= n:
            return False
        self.i = j + 1
        return True

    def backquoted(self, j: int) -> int:
        """`cmd`: kept as written, marked dynamic; returns the index after it."""
        end = self.text.find("`", j + 1)
        end = self.n - 1 if end < 0 else end
        self.buf.append(self.text[j:end + 1])
        self.dynamic = True
        self.line += self.text.count("\n", j, end)
        return end + 1

    def redirection(self) -> None:
        """`>`, `2>&1`, `<<EOF`...: the target word is dropped, a heredoc body skipped at the next newline."""
        text = self.text
        if self.in_word and "".join(self.buf).isdigit() and not self.dynamic:
            self.buf, self.in_word = [], False          # an fd number: `2>&1`
        self.finish()
        m = _REDIRECT.match(text, self.i)
        sym = m.group(0) if m else text[self.i]
        self.i += len(sym)
        if sym in ("<<", "<<-"):
            self.pending_heredoc = sym == "<<-"
            while self.i < self.n and text[self.i] in " \t":
                self.i += 1
            return
        if sym in (">&", "<&"):
            m2 = _FD_DUP.match(text, self.i)
            if m2:
                self.i = m2.end()
                return
        self.drop_next = True

    def control(self) -> None:
        self.finish()
        two = self.text[self.i:self.i + 2]
        sym = two if two in ("&&", "||", ";;", "|&") else self.text[self.i]
        self.op(sym)
        self.i += len(sym)

    # -- one reader per character that starts a construct -------------------------------------------------------

    def backslash(self) -> None:
        """A backslash before a newline continues the line; before anything else it quotes that character."""
        text, n = self.text, self.n
        if self.i + 1 < n and text[self.i + 1] == "\n":
            self.i += 2
            self.line += 1
            self.continued = True
            return
        self.begin()
        if self.i + 1 < n:
            self.buf.append(text[self.i + 1])
        self.i += 2

    def blank(self) -> None:
        self.finish()
        self.i += 1

    def hash_sign(self) -> None:
        """`#` outside a word starts a comment (noted when it ends a continued command); inside, it is text."""
        if self.in_word:
            self.plain()
            return
        if self.since_op and self.continued:
            self.cut_line = self.line
        end = self.text.find("\n", self.i)
        self.i = self.n if end < 0 else end

    def single_quote(self) -> list[Word] | None:
        """'...'; the words sh would run when the quote is never closed."""
        if not self.single_quoted():
            return _unterminated(self.out, self.text, self.i, self.line, "single")
        return None

    def double_quote(self) -> list[Word] | None:
        """"..."; the words sh would run when the quote is never closed."""
        start = self.i
        if not self.double_quoted():
            return _unterminated(self.out, self.text, start, self.start_line, "double")
        return None

    def dollar_sign(self) -> None:
        """$'...' (ANSI-C quoting) or an expansion."""
        if self.i + 1 < self.n and self.text[self.i + 1] == "'":
            self.ansi_c_quoted()
            return
        self.begin()
        self.i = self.dollar(self.i)

    def backquote(self) -> None:
        self.begin()
        self.i = self.backquoted(self.i)

    def ampersand(self) -> None:
        """`&>` redirects; any other `&` is a control operator (`&`, `&&`)."""
        if self.i + 1 < self.n and self.text[self.i + 1] == ">":
            self.redirection()
        else:
            self.control()

    def plain(self) -> None:
        """A run of characters with no meaning to the shell."""
        self.begin()
        m = _PLAIN.match(self.text, self.i)
        end = m.end() if m else self.i + 1
        self.buf.append(self.text[self.i:end])
        self.i = end

    #: The reader of each character that starts a construct; any other character starts plain text.
    READERS: dict[str, Callable[[ShellLexer], list[Word] | None]] = {
        "\\": backslash, "\n": newline, **dict.fromkeys(" \t\r", blank), "#": hash_sign, "'": single_quote,
        '"': double_quote, "$": dollar_sign, "`": backquote, "<": redirection, ">": redirection,
        "&": ampersand, **dict.fromkeys(";|()", control),
    }

    # -- the loop -----------------------------------------------------------------------------------------------

    def words(self) -> list[Word]:
        """Tokenize shell text as sh would, without expanding anything."""
        while self.i < self.n:
            read = self.READERS.get(self.text[self.i])
            given_up = read(self) if read else self.plain()
            if given_up is not None:    # an unterminated quote: the words sh runs before it
                return given_up
        self.finish()
        return self.out


def shell_words(text: str, first_line: int = 1) -> list[Word]:
    """Tokenize shell text as sh would, without expanding anything."""
    return ShellLexer(text, first_line).words()


def simple_commands(words: list[Word]) -> list[tuple[list[Word], Word | None]]:
    """Split at control operators: [(words, the operator that ended them)]."""
    out: list[tuple[list[Word], Word | None]] = []
    cur: list[Word] = []
    for w in words:
        if w.op:
            if cur:
                out.append((cur, w))
            cur = []
            continue
        cur.append(w)
    if cur:
        out.append((cur, None))
    return out


def _unterminated(words: list[Word], text: str, pos: int, line: int, kind: str) -> list[Word]:
    """An unterminated quote: sh runs the commands before it, then stops with a syntax error."""
    k = len(words)
    while k and not words[k - 1].op:
        k -= 1
    if "vllm" in text[pos:] or any("vllm" in w.text for w in words[k:]):
        raise LaunchFileError(f"line {line}: unterminated {kind} quote: the shell stops there with a syntax "
                              "error, and the vLLM command never runs")
    while words and not words[-1].op:
        words.pop()                 # the command holding the quote never runs
    return words
