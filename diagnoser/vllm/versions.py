"""vLLM version strings as vLLM, pip and images print them, mapped to the release whose defaults apply.

A source build prints `0.26.1rc1.dev156+g0eec856cc`, a CUDA wheel `0.10.1+cu128`, a patch release `0.10.1.1`,
an image tag `v0.8.5.post1` or `v0.10.1-cu128`. The defaults data (data/releases.yaml) is keyed by final
releases (major.minor.patch), so every string is mapped to one of those, with a note in words whenever the
mapping is not the identity: the plan says which release's data it used and why, never silently.

Pure string arithmetic: nothing here reads the data file (releases.py compares against the releases it knows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from diagnoser.lazyre import lazy

Version = tuple[int, int, int]

#: PEP 440 public version (release, pre, post, dev) with an optional `v` and local label (`+cu128`, `+g<sha>`).
_PEP440 = lazy(
    r"""^v?(?P<release>\d+(?:\.\d+){0,3})
        (?:[-_.]?(?P<pre>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>\d*))?
        (?:[-_.]?(?P<post>post|rev|r)[-_.]?(?P<post_n>\d*))?
        (?:[-_.]?(?P<dev>dev)[-_.]?(?P<dev_n>\d*))?
        (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?$""",
    re.IGNORECASE | re.VERBOSE,
)
#: Image tags cannot hold '+': a build variant follows the version after a dash (`v0.10.1-cu128`,
#: `v0.9.0-ubuntu22.04`); it names the CUDA or OS variant, not another release.
_TAG_VARIANT = lazy(r"^(?P<version>v?\d+(?:\.\d+){1,3}(?:[._-]?(?:rc|post|dev)\d*)*)-(?P<variant>[a-z][\w.-]*)$",
                    re.IGNORECASE)


@dataclass(frozen=True)
class ReleaseRef:
    """A version string read: the release whose defaults apply, and why when it is not the string itself."""

    text: str
    release: Version
    pre: str = ""        # 'rc1', 'a2', ...: a pre-release of `release`
    post: str = ""       # 'post1': a post-release of `release`
    dev: str = ""        # 'dev156': a development build towards `release` (or its pre-release)
    fourth: int | None = None  # the fourth number of a patch release (0.10.1.1)
    local: str = ""      # '+cu128', '+g0eec856cc': the build's variant or commit

    @property
    def release_str(self) -> str:
        return ".".join(str(p) for p in self.release)

    @property
    def exact(self) -> bool:
        """The string names a final release as the data knows it (`0.8.5`, `v0.8.5`)."""
        return not (self.pre or self.post or self.dev or self.fourth is not None or self.local)

    def note(self) -> str:
        """Why the release's defaults stand for this string, in words ('' when the string is the release).

        >>> parse("0.9.2rc1.dev3+gabc1234").note()  # doctest: +NORMALIZE_WHITESPACE
        "0.9.2rc1.dev3+gabc1234 is a development build (commit gabc1234) of 0.9.2's release candidate 1:
        planned with 0.9.2's defaults"
        >>> parse("v0.10.1.1").note()
        "0.10.1.1 is a patch of 0.10.1: planned with 0.10.1's defaults"
        >>> parse("0.8.5").note()
        ''
        """
        if self.exact:
            return ""
        r = self.release_str
        text = self.text[1:] if self.text[:1] in "vV" else self.text
        parts = []
        if self.dev:
            what = f"a development build{_local_words(self.local, commit=True)}"
            parts.append(f"{what} of {r}'s {_pre_words(self.pre)}" if self.pre else f"{what} towards {r}")
        elif self.pre:
            parts.append(f"{_pre_words(self.pre)} of {r}")
        elif self.post:
            parts.append(f"a post-release ({self.post}) of {r}")
        elif self.fourth is not None:
            parts.append(f"a patch of {r}")
        if self.local and not self.dev:
            parts.append(f"built {_local_words(self.local, commit=False).strip()}")
        head = " and ".join(parts) if parts else f"release {r}"
        return f"{text} is {head}: planned with {r}'s defaults"


def _pre_words(pre: str) -> str:
    """'rc1' -> 'release candidate 1'."""
    m = re.match(r"([a-z]+)(\d*)", pre)
    kind, n = (m.group(1), m.group(2)) if m else (pre, "")
    word = {"rc": "release candidate", "c": "release candidate", "a": "alpha", "alpha": "alpha",
            "b": "beta", "beta": "beta"}.get(kind, "pre-release")
    return f"{word} {n}".strip()


def _local_words(local: str, commit: bool) -> str:
    """'+cu128' -> ' for CUDA 12.8'; '+g0eec856cc' -> ' (commit g0eec856cc)'."""
    if not local:
        return ""
    cuda = re.fullmatch(r"cu(\d+)(\d)", local.split(".")[0], re.IGNORECASE)
    if cuda:
        return f" for CUDA {cuda.group(1)}.{cuda.group(2)}"
    sha = next((p for p in re.split(r"[-_.]", local) if re.fullmatch(r"g[0-9a-f]{6,40}", p)), "")
    if sha:
        return f" (commit {sha})"
    return f" ({local})" if commit else f" as {local}"


def parse(text: str) -> ReleaseRef | None:
    """A version string -> the release whose defaults apply; None when the text is not a version.

    >>> parse("0.26.1rc1.dev156+g0eec856cc").release, parse("v0.6.3.post1").release, parse("0.10.1+cu128").release
    ((0, 26, 1), (0, 6, 3), (0, 10, 1))
    >>> parse("latest") is None, parse("nightly-0eec856cc") is None
    (True, True)
    """
    s = str(text or "").strip()
    m = _PEP440.match(s)
    if not m:
        return None
    nums = [int(p) for p in m.group("release").split(".")]
    while len(nums) < 3:
        nums.append(0)
    pre = (m.group("pre") or "").lower()
    pre = {"alpha": "a", "beta": "b", "c": "rc", "pre": "rc", "preview": "rc"}.get(pre, pre)
    return ReleaseRef(
        text=s, release=(nums[0], nums[1], nums[2]),
        pre=f"{pre}{m.group('pre_n') or 0}" if pre else "",
        post=f"post{m.group('post_n') or 0}" if m.group("post") else "",
        dev=f"dev{m.group('dev_n') or 0}" if m.group("dev") else "",
        fourth=nums[3] if len(nums) > 3 else None,
        local=(m.group("local") or "").lower(),
    )


def parse_image_tag(tag: str) -> ReleaseRef | None:
    """An image tag -> the release it ships; a '-cu128'-style variant after the version is kept as the local part.

    >>> [parse_image_tag(t).release for t in ("v0.10.1.1", "v0.6.3.post1", "v0.8.5.post1", "v0.10.1-cu128")]
    [(0, 10, 1), (0, 6, 3), (0, 8, 5), (0, 10, 1)]
    >>> parse_image_tag("latest") is None, parse_image_tag("nightly") is None
    (True, True)
    """
    tag = str(tag or "").strip()
    ref = parse(tag)
    if ref is not None:
        return ref
    m = _TAG_VARIANT.match(tag)
    if not m:
        return None
    base = parse(m.group("version"))
    if base is None:
        return None
    return ReleaseRef(text=tag, release=base.release, pre=base.pre, post=base.post, dev=base.dev,
                      fourth=base.fourth, local=m.group("variant").lower())
