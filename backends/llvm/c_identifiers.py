"""Names in generated C: every name that reaches a header or C file is an identifier.

A standalone library's names come from the exported program (its function name, argument
names, pytree keys), which may come from a file someone else wrote. None of that text is
ever written into generated source as it is:

* :func:`identifier` turns any text into ``[A-Za-z_][A-Za-z0-9_]*``: letters with accents
  lose them (``poids_é`` -> ``poids_e``), every other run of characters becomes one
  ``_``, a leading digit gets a prefix, and the result is at most :data:`MAX_LENGTH`
  characters long;
* a :class:`Namespace` hands out names that are distinct from one another (also when
  upper-cased, for the ``<ENTRY>_<ARRAY>_SIZE`` macros) and from reserved names: C and C++
  keywords, names of the standard library that are macros or types (``errno``, ``int``,
  ``NULL``, ``stdin``), the names the compiler itself predefines or the generated file's
  headers define (``linux``, ``PTHREAD_ONCE_INIT``), and the ``ft_`` prefix of the
  library's internals. A name that clashes gets the first free suffix ``_2``, ``_3``, ...
  in the order names are claimed, so the same program always gets the same names;
* :func:`comment_text` is the only text a comment carries: words of identifier characters.

    >>> names = Namespace(reserved=KEYWORDS | STANDARD_NAMES)
    >>> names.claim("int"), names.claim("x"), names.claim("X"), names.claim("f */ g")
    ('int_2', 'x', 'X_2', 'f_g')
"""
from __future__ import annotations

import functools
import re
import subprocess
import unicodedata

MAX_LENGTH = 48  # before a suffix; C guarantees 63 significant characters

KEYWORDS = frozenset("""
    auto break case char const continue default do double else enum extern float for goto
    if inline int long register restrict return short signed sizeof static struct switch
    typedef union unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex
    _Generic _Imaginary _Noreturn _Static_assert _Thread_local alignas alignof bool
    constexpr false nullptr static_assert thread_local true typeof typeof_unqual _BitInt
    _Decimal32 _Decimal64 _Decimal128 asm fortran
    and and_eq bitand bitor catch char8_t char16_t char32_t class co_await co_return
    co_yield compl concept const_cast consteval constinit decltype delete dynamic_cast
    explicit export friend mutable namespace new noexcept not not_eq operator or or_eq
    private protected public reinterpret_cast requires static_cast template this throw try
    typeid typename using virtual wchar_t xor xor_eq final override import module
""".split())

# names of the C standard library (and common POSIX ones) that are macros or types, so
# that a parameter of that name would not compile, or would not in a user's program
STANDARD_NAMES = frozenset("""
    errno stdin stdout stderr assert NULL EOF offsetof size_t ssize_t ptrdiff_t max_align_t
    wint_t wctype_t mbstate_t FILE fpos_t off_t va_list va_arg va_start va_end va_copy
    jmp_buf setjmp sig_atomic_t time_t clock_t div_t ldiv_t lldiv_t intmax_t uintmax_t
    intptr_t uintptr_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
    noreturn complex imaginary I INFINITY NAN HUGE_VAL HUGE_VALF HUGE_VALL FP_NAN FP_ZERO
    FP_INFINITE FP_NORMAL FP_SUBNORMAL M_E M_PI M_PI_2 M_PI_4 M_1_PI M_2_PI M_2_SQRTPI
    M_LN2 M_LN10 M_LOG2E M_LOG10E M_SQRT2 M_SQRT1_2 CHAR_BIT CHAR_MAX CHAR_MIN SCHAR_MAX
    SCHAR_MIN UCHAR_MAX SHRT_MAX SHRT_MIN USHRT_MAX INT_MAX INT_MIN UINT_MAX LONG_MAX
    LONG_MIN ULONG_MAX LLONG_MAX LLONG_MIN ULLONG_MAX FLT_MAX FLT_MIN FLT_EPSILON DBL_MAX
    DBL_MIN DBL_EPSILON SIZE_MAX RAND_MAX EXIT_SUCCESS EXIT_FAILURE BUFSIZ SEEK_SET
    SEEK_CUR SEEK_END CLOCKS_PER_SEC EDOM ERANGE EILSEQ EINVAL ENOMEM SIGINT SIGTERM
    SIGSEGV linux unix i386 main environ
""".split()) | frozenset(f"{u}INT{kind}{n}_{end}" for u in ("", "U")
                         for kind in ("", "_LEAST", "_FAST") for n in (8, 16, 32, 64)
                         for end in ("MAX", "MIN", "C", "WIDTH"))

# the generated code's own names: the library's internals all start with ft_ / FT_
INTERNAL_PREFIX = re.compile(r"(?i)ft_")


def identifier(text, fallback: str = "x") -> str:
    """``text`` as a C identifier (``params['w1']`` -> ``params_w1``, ``"1st"`` ->
    ``x_1st``, ``"*/"`` -> ``fallback``)."""
    ascii_text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode()
    name = re.sub(r"[^0-9A-Za-z]+", "_", ascii_text).strip("_")[:MAX_LENGTH].rstrip("_")
    if not name:
        return fallback
    if name[0].isdigit() or INTERNAL_PREFIX.match(name):
        name = f"{fallback}_{name}"[:MAX_LENGTH].rstrip("_")
    return name


def comment_text(text, fallback: str = "") -> str:
    """Text for a comment of generated C: the words of ``text`` made of identifier
    characters, joined by ``_`` (never ``*/``, a backslash or a non-ASCII byte)."""
    return identifier(text, fallback) if text else fallback


class Namespace:
    """Distinct C identifiers: ``claim`` returns a free one for the text it is given.
    ``reserved`` names are compared exactly; with ``fold_case``, claimed names are also
    distinct when upper-cased."""

    def __init__(self, reserved=frozenset(), fold_case: bool = False):
        self.reserved = set(reserved)
        self.fold_case = fold_case
        self._claimed: set[str] = set()

    def __contains__(self, name: str) -> bool:
        return name in self.reserved or \
            (name.upper() if self.fold_case else name) in self._claimed

    def claim(self, text, fallback: str = "x", ending: str = "", also=()) -> str:
        """The identifier of ``text`` + ``ending``, with the first suffix (``_2``, ...)
        before ``ending`` that makes it and its companions (``also``: endings of other
        names derived from it, as ``_workspace_size``) free; all are then taken."""
        stem = identifier(text, fallback)
        k = 1
        while True:
            base = stem if k == 1 else f"{stem}_{k}"
            names = [base + ending] + [base + e for e in also]
            if not any(n in self for n in names):
                for n in names:
                    self._claimed.add(n.upper() if self.fold_case else n)
                return names[0]
            k += 1


@functools.lru_cache(maxsize=8)
def compiler_names(compiler: str, prelude: str) -> tuple[frozenset, frozenset]:
    """(macros, identifiers) that ``compiler`` sees after ``prelude`` (the generated
    file's ``#define``/``#include`` lines): every macro it predefines or the headers
    define, and every identifier the headers declare. Empty sets if the compiler cannot
    tell (the static lists above still apply)."""
    def run(*flags):
        try:
            result = subprocess.run(compiler.split() + ["-x", "c", *flags, "-"], input=prelude,
                                    capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return ""
        return result.stdout if result.returncode == 0 else ""
    macros = frozenset(m.group(1) for m in re.finditer(
        r"^#define ([A-Za-z_][A-Za-z0-9_]*)", run("-dM", "-E"), re.M))
    declared = frozenset(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", run("-E", "-P")))
    return macros, declared
