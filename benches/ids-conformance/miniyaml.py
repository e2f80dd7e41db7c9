"""A small YAML reader for suricata-verify's test.yaml files (Python standard library only).

It reads the subset those files use: block mappings and sequences (including `- key: v`
items), plain, single- and double-quoted scalars (also continued over several lines),
flow collections (`[a, b]`, `{k: v}`), block scalars (`|`, `|-`, `>`), comments, and the
`%YAML` / `---` header. Scalars resolve as YAML 1.1 does for the values these files hold
(integers, floats, booleans, null, else strings). Anchors and aliases are not resolved
(kept as text). It exists so the harness needs nothing beyond the standard library; it
was checked against PyYAML on every test.yaml of suricata-verify (see README.md).
"""

import re

__all__ = ["load", "YamlError"]


class YamlError(ValueError):
    """The text uses YAML this reader does not handle."""


_INT = re.compile(r"^[-+]?(0|[1-9][0-9_]*)$")
_HEX = re.compile(r"^0x[0-9a-fA-F_]+$")
_FLOAT = re.compile(r"^[-+]?([0-9][0-9_]*)?\.[0-9_]*([eE][-+][0-9]+)?$")


def _resolve(text):
    t = text.strip()
    if t in ("", "~", "null", "Null", "NULL"):
        return None
    if t in ("true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"):
        return True
    if t in ("false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"):
        return False
    if _INT.match(t):
        return int(t.replace("_", ""))
    if _HEX.match(t):
        return int(t.replace("_", ""), 16)
    if _FLOAT.match(t) and t not in (".", "-.", "+."):
        return float(t.replace("_", ""))
    return t


_ESC = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", '"': '"', "\\": "\\", "/": "/",
        "a": "\a", "b": "\b", "e": "\x1b", " ": " ", "f": "\f", "v": "\v"}


def _unquote_double(s):
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n in _ESC:
                out.append(_ESC[n])
                i += 2
            elif n in "xuU":
                width = {"x": 2, "u": 4, "U": 8}[n]
                out.append(chr(int(s[i + 2:i + 2 + width], 16)))
                i += 2 + width
            else:
                raise YamlError("unknown escape \\" + n)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _fold(parts):
    """Joins the lines of a multi-line flow scalar: one newline folds to a space."""
    out = []
    for p in parts:
        p = p.strip()
        if not out:
            out.append(p)
        elif p == "":
            out.append("\n")
        elif out[-1].endswith("\n"):
            out.append(p)
        else:
            out.append(" " + p)
    return "".join(out)


def _scalar(text):
    """A complete scalar (quoted or plain) or flow collection, as written after `key:`."""
    t = text.strip()
    if t.startswith("[") or t.startswith("{"):
        value, rest = _flow(t, 0)
        if t[rest:].strip():
            raise YamlError("text after a flow collection: " + t)
        return value
    if t.startswith('"'):
        if len(t) < 2 or not t.endswith('"'):
            raise YamlError("unterminated string: " + t)
        return _unquote_double(t[1:-1])
    if t.startswith("'"):
        if len(t) < 2 or not t.endswith("'"):
            raise YamlError("unterminated string: " + t)
        return t[1:-1].replace("''", "'")
    if t.startswith(("&", "*", "!")):
        return t
    return _resolve(t)


def _flow(s, i):
    """Parses a flow collection starting at s[i]; returns (value, index after it)."""
    def ws(j):
        while j < len(s) and s[j] in " \t\n":
            j += 1
        return j

    def item(j, enders):
        j = ws(j)
        if j < len(s) and s[j] in "[{":
            return _flow(s, j)
        if j < len(s) and s[j] in "\"'":
            q = s[j]
            k = j + 1
            while k < len(s):
                if q == '"' and s[k] == "\\":
                    k += 2
                    continue
                if s[k] == q:
                    if q == "'" and k + 1 < len(s) and s[k + 1] == "'":
                        k += 2
                        continue
                    break
                k += 1
            return _scalar(s[j:k + 1]), k + 1
        k = j
        while k < len(s) and s[k] not in enders:
            if s[k] == ":" and (k + 1 == len(s) or s[k + 1] in " ,]}"):
                break
            k += 1
        return _resolve(s[j:k]), k

    open_ = s[i]
    close = "]" if open_ == "[" else "}"
    j = i + 1
    out = [] if open_ == "[" else {}
    while True:
        j = ws(j)
        if j >= len(s):
            raise YamlError("unterminated flow collection")
        if s[j] == close:
            return out, j + 1
        key, j = item(j, ",:" + close)
        j = ws(j)
        if open_ == "{":
            if j < len(s) and s[j] == ":":
                value, j = item(j + 1, "," + close)
            else:
                value = None
            out[key] = value
        else:
            out.append(key)
        j = ws(j)
        if j < len(s) and s[j] == ",":
            j += 1
        elif j < len(s) and s[j] == close:
            continue
        else:
            raise YamlError("bad flow collection near " + s[i:j + 10])


def _strip_comment(line):
    """Removes a trailing `# comment` outside quotes."""
    q = None
    for i, c in enumerate(line):
        if q:
            if c == q:
                q = None
            elif c == "\\" and q == '"':
                continue
        elif c in "\"'" and (i == 0 or line[i - 1] in " \t[{,:-"):
            q = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _split_key(content):
    """Splits `key: value` (outside quotes and brackets); None if not a mapping entry."""
    if content.startswith(("[", "{")):
        return None
    q, depth = None, 0
    if content[:1] in "\"'":
        q = content[0]
        i = 1
        while i < len(content) and content[i] != q:
            i += 1
        end = i + 1
        if content[end:end + 1] == ":" and (end + 1 == len(content) or content[end + 1] == " "):
            return _scalar(content[:end]), content[end + 1:].strip()
        return None
    for i, c in enumerate(content):
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == ":" and depth == 0 and (i + 1 == len(content) or content[i + 1] in " \t"):
            key = content[:i].strip()
            return _resolve(key) if key else None, content[i + 1:].strip()
    return None


class _Reader:
    def __init__(self, text):
        self.raw = text.replace("\t", "    ").split("\n")
        # (indent, content) for each meaningful line; raw index kept for block scalars.
        self.lines = []
        for n, line in enumerate(self.raw):
            s = line.strip()
            if not s or s.startswith("#") or s.startswith("%") or s == "---":
                continue
            if s == "...":
                break
            self.lines.append([len(line) - len(line.lstrip(" ")), line.lstrip(" "), n])
        self.i = 0

    def peek(self):
        return self.lines[self.i] if self.i < len(self.lines) else None

    def block(self, indent):
        line = self.peek()
        if line is None or line[0] < indent:
            return None
        return self.node_at(line[0])

    def seq(self, indent):
        out = []
        while True:
            line = self.peek()
            if line is None or line[0] != indent:
                break
            content = _strip_comment(line[1])
            if not (content == "-" or content.startswith("- ")):
                break
            rest = line[1][1:]
            body = rest.lstrip(" ")
            if not _strip_comment(body):
                self.i += 1
                nxt = self.peek()
                out.append(self.block(nxt[0]) if nxt and nxt[0] > indent else None)
                continue
            # `- item`: re-read the item as if it started at its own column.
            col = indent + 1 + (len(rest) - len(body))
            line[0], line[1] = col, body
            out.append(self.node_at(col))
        return out

    def node_at(self, col):
        """The node on the current line (already at column col)."""
        line = self.peek()
        content = _strip_comment(line[1])
        if content == "-" or content.startswith("- "):
            return self.seq(col)
        if _split_key(content) is not None:
            return self.mapping(col)
        self.i += 1
        return self.flow_scalar(content, col - 1)

    def flow_scalar(self, first, indent):
        """A scalar or flow collection that may continue on more-indented lines."""
        parts = [first]
        opened = first.count("[") + first.count("{") - first.count("]") - first.count("}")
        quote = first[:1] if first[:1] in "\"'" else None

        def unfinished():
            joined = "\n".join(parts)
            if quote:
                body = joined[1:]
                return not (len(joined) >= 2 and body.rstrip().endswith(quote))
            return opened > 0
        while True:
            nxt = self.peek()
            if nxt is None:
                break
            if not unfinished() and (nxt[0] <= indent or quote or first[:1] in "[{"):
                break
            if not unfinished() and _split_key(_strip_comment(nxt[1])) is not None:
                break
            text = self.raw[nxt[2]].strip() if quote else _strip_comment(nxt[1])
            opened += text.count("[") + text.count("{") - text.count("]") - text.count("}")
            parts.append(text)
            self.i += 1
        if len(parts) == 1:
            return _scalar(first)
        if first[:1] in "[{":
            return _scalar(" ".join(parts))
        if quote:
            return _scalar(_fold(parts))
        return _resolve(_fold(parts))

    def block_scalar(self, indicator, indent, raw_index):
        style, chomp = indicator[0], indicator[1:2]
        body = []
        n = raw_index + 1
        block_indent = None
        while n < len(self.raw):
            line = self.raw[n].replace("\t", "    ")
            if line.strip():
                ind = len(line) - len(line.lstrip(" "))
                if ind <= indent:
                    break
                if block_indent is None:
                    block_indent = ind
                if ind < block_indent:
                    break
                body.append(line[block_indent:])
            else:
                body.append("")
            n += 1
        while self.i < len(self.lines) and self.lines[self.i][2] < n:
            self.i += 1
        while body and body[-1] == "":
            body.pop()
        if style == "|":
            text = "\n".join(body)
        else:
            text = _fold(body) if body else ""
        if chomp != "-" and body:
            text += "\n"
        return text

    def mapping(self, indent):
        out = {}
        while True:
            line = self.peek()
            if line is None or line[0] != indent:
                break
            content = _strip_comment(line[1])
            if content == "-" or content.startswith("- "):
                break
            kv = _split_key(content)
            if kv is None:
                raise YamlError("expected `key: value`: " + content)
            key, value = kv
            raw_index = line[2]
            self.i += 1
            if value and value[0] in "|>" and re.match(r"^[|>][-+]?[0-9]?$", value):
                out[key] = self.block_scalar(value, indent, raw_index)
            elif value:
                out[key] = self.flow_scalar(value, indent)
            else:
                nxt = self.peek()
                if nxt and nxt[0] > indent:
                    out[key] = self.block(nxt[0])
                elif nxt and nxt[0] == indent and _strip_comment(nxt[1])[:1] == "-" and (
                        _strip_comment(nxt[1]) == "-" or nxt[1].startswith("- ")):
                    out[key] = self.seq(indent)
                else:
                    out[key] = None
        return out


def load(text):
    """Parses a YAML document of the supported subset; raises YamlError otherwise."""
    r = _Reader(text)
    if not r.lines:
        return None
    try:
        value = r.block(r.lines[0][0])
    except (IndexError, ValueError) as e:
        raise YamlError(str(e)) from None
    if r.i != len(r.lines):
        raise YamlError("unexpected line: " + r.lines[r.i][1])
    return value
