#!/usr/bin/env python3
"""Judges relayd's IDS against suricata-verify's rules and captures, and against Suricata.

Three measurements (see README.md for the decisions behind each):

1. acceptance: the share of test.rules files whose every rule loads with `strict = true`
   and Suricata's default variables (the `rulecheck` example), with the refusing keywords;
2. agreement with Suricata: for each test whose rules load in relayd and in the installed
   Suricata and whose capture is present, the (sid, alert count) pairs of `relayd replay`
   and of `suricata -r` on the same capture and rules;
3. agreement with the counts the test's own test.yaml expects.

Standard library only (test.yaml is read by miniyaml.py). Suricata's results depend only
on the tree, the Suricata binary and the options, so they are cached under OUT/cache and
a re-run after changing relayd costs only the relayd runs.
"""

import argparse
import collections
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import miniyaml  # noqa: E402

# The newest Suricata release whose behaviour test.yaml expectations are taken for:
# requirements (`min-version`, `lt-version`) are evaluated against it.
DEFAULT_EXPECT_VERSION = "8.0"

# Test args that stop Suricata from processing the capture: such tests are not runs.
NO_RUN_ARGS = {"-T", "--engine-analysis", "--dump-config", "--list-keywords",
               "--list-app-layer-protos", "--build-info"}
# Args (with their value) the harness sets itself or that only change logging.
DROP_WITH_VALUE = {"-l", "-c", "-r", "-S", "-s", "--runmode", "--pcap-file-continuous",
                   "--unix-socket", "--pidfile", "--user", "--group"}
DROP_ALONE = {"-v", "-vv", "-vvv", "-vvvv", "-q", "--init-errors-fatal",
              "--pcap-file-delete", "--strict-rule-keywords"}
# `--set` keys that bring configuration relayd has no counterpart for (reputation,
# datasets, scripts) or that would change where Suricata logs: dropped, so
# that Suricata's alerts are what the rules alone say on the capture.
DROP_SET_KEYS = re.compile(
    r"^(reputation-|default-reputation-path|datasets\.|security\.lua|"
    r"logging\.|outputs\.|default-log-dir|classification-file|reference-config-file|"
    r"default-rule-path|rule-files|unix-command)")


# Top-level keys of a test's own suricata.yaml that change only what Suricata logs.
LOGGING_KEYS = {"outputs", "logging", "stats", "engine-analysis", "default-log-dir",
                "profiling", "run-as", "classification-file", "reference-config-file"}


# Suricata `--set` options with a counterpart in relayd's `ids` service: honoured test
# args are given to both (relayd key, value parser).
def _bool(v):
    return {"true": True, "yes": True, "1": True, "on": True}.get(v.strip().lower(), False)


def _size(v):
    m = re.match(r"^\s*(\d+)\s*(([kmg])i?b)?\s*$", v, re.I)
    if not m:
        raise ValueError(v)
    scale = {None: 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[
        m.group(3).lower() if m.group(3) else None]
    return int(m.group(1)) * scale


RELAYD_SET = {
    "stream.midstream": ("midstream", _bool),
    "stream.reassembly.depth": ("stream_depth", _size),
    "stream.reassembly.memcap": ("stream_memcap", _size),
    "threshold-file": ("threshold_file", str),
    "app-layer.protocols.http.libhtp.default-config.request-body-limit":
        ("http_request_body_limit", _size),
    "app-layer.protocols.http.libhtp.default-config.response-body-limit":
        ("http_response_body_limit", _size),
    "app-layer.protocols.http.libhtp.default-config.response-body-decompress-layer-limit":
        ("http_decompress_layers", int),
    "app-layer.protocols.http.libhtp.default-config.lzma-enabled": ("http_lzma", _bool),
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# versions (as suricata-verify's run.py compares them)

def parse_version(text, fill):
    """'8', '8.0', '8.0.7' -> a 3-tuple; missing parts are `fill`."""
    parts = [int(p) for p in re.findall(r"\d+", str(text))[:3]]
    while len(parts) < 3:
        parts.append(fill)
    return tuple(parts)


def requires_ok(requires, version):
    """Whether the version requirements of a `requires` block hold for `version`."""
    if not isinstance(requires, dict):
        return True
    if "min-version" in requires and version < parse_version(requires["min-version"], 0):
        return False
    if "lt-version" in requires and not version < parse_version(requires["lt-version"], 0):
        return False
    if "gt-version" in requires and not version > parse_version(requires["gt-version"], 0):
        return False
    if "version" in requires:
        want = re.findall(r"\d+", str(requires["version"]))
        have = [str(v) for v in version]
        if have[:len(want)] != want:
            return False
    return True


# ---------------------------------------------------------------------------------------
# tests

class Test:
    """One suricata-verify test: a directory holding test.yaml."""

    def __init__(self, tests_dir, path):
        self.path = path
        self.id = os.path.relpath(path, tests_dir)
        self.name = os.path.basename(path)
        self.cfg = {}
        self.status = None      # why it was not compared, or "compared"
        self.detail = ""
        self.rules = None       # the rules file
        self.pcap = None
        self.args = []          # honoured Suricata args
        self.dropped_args = []  # args left out
        self.expected = {}      # sid -> count from test.yaml
        self.suricata = None    # sid -> count, or None
        self.relayd = None      # sid -> count, or None
        self.notes = []
        self.own_config = []    # detection-relevant top-level keys of its suricata.yaml
        self.relayd_conf = {}   # `ids` service keys taken from the args (RELAYD_SET)

    def plain(self):
        """Whether Suricata ran this test as its author configured it (see report)."""
        return not self.own_config and not any(a.startswith("--set") for a in self.dropped_args)

    def skip(self, status, detail=""):
        self.status, self.detail = status, detail
        return self


def discover(tests_dir, pattern):
    """The test directories (holding test.yaml, not descended further), as run.py finds them."""
    out = []
    for dirpath, dirnames, filenames in os.walk(tests_dir, followlinks=True):
        dirnames.sort()
        if dirpath == tests_dir:
            continue
        if "test.yaml" not in filenames:
            continue
        dirnames[:] = []
        rel = os.path.relpath(dirpath, tests_dir)
        if pattern and not re.search(pattern, rel):
            continue
        out.append(dirpath)
    return sorted(out)


def is_lfs_pointer(path):
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return True
    return head.startswith(b"version https://git-lfs") or head.startswith(b"version http")


def split_args(cfg_args, test, out_dir):
    """Splits test.yaml `args` as run.py does; returns (honoured, dropped, no_run)."""
    if not isinstance(cfg_args, list):
        return [], [], False
    tokens = []
    for a in cfg_args:
        tokens += [t for t in re.split(r"\s", str(a)) if t]
    env = {"TEST_DIR": test.path, "OUTPUT_DIR": out_dir}
    keep, drop, no_run = [], [], False
    i = 0
    while i < len(tokens):
        t = re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), m.group(0)), tokens[i])
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        name = t.split("=", 1)[0]
        if name in NO_RUN_ARGS:
            no_run = True
            drop.append(t)
        elif name in DROP_ALONE or "${" in t:
            drop.append(t)
        elif name in DROP_WITH_VALUE:
            drop.append(t if "=" in t else f"{t} {nxt}")
            i += 0 if "=" in t else 1
        elif t == "--set" and nxt is not None:
            value = re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), m.group(0)), nxt)
            if DROP_SET_KEYS.match(value) or "${" in value:
                drop.append(f"--set {value}")
            else:
                keep += ["--set", value]
                key, _, v = value.partition("=")
                if key in RELAYD_SET:
                    name, parse = RELAYD_SET[key]
                    try:
                        test.relayd_conf[name] = parse(v)
                    except ValueError:
                        pass
            i += 1
        elif t == "--simulate-ips":
            pass  # decided by --mode
        elif t in ("-k", "--data-dir") and nxt is not None:
            keep += [t, out_dir if t == "--data-dir" else nxt]
            i += 1
        else:
            keep.append(t)
        i += 1
    return keep, drop, no_run


def sids_by_msg(rules):
    """msg -> sid for the rules of a file whose msg is unique in it (EVE's `signature`)."""
    found = collections.defaultdict(set)
    try:
        with open(rules, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lstrip().startswith("#"):
                    continue
                m = re.search(r'[(;]\s*msg\s*:\s*"((?:[^"\\]|\\.)*)"', line)
                sid = re.search(r"[(;]\s*sid\s*:\s*(\d+)", line)
                if m and sid:
                    found[re.sub(r"\\(.)", r"\1", m.group(1))].add(int(sid.group(1)))
    except OSError:
        pass
    return {msg: min(s) for msg, s in found.items() if len(s) == 1}


def expected_counts(cfg, version, rules):
    """sid -> count from the `filter` checks that count one rule's alerts in eve.json.

    A check counts if its match names the rule by `alert.signature_id`, or by
    `alert.signature` (the msg, when unique in the rules file), optionally with
    `event_type: alert`, and nothing else; it reads eve.json; and its `requires` hold for
    `version`. Sids with contradicting applicable checks are left out."""
    if not requires_ok(cfg.get("requires"), version):
        return {}
    by_msg = None
    found = collections.defaultdict(set)
    checks = cfg.get("checks")
    for check in checks if isinstance(checks, list) else []:
        f = check.get("filter") if isinstance(check, dict) else None
        if not isinstance(f, dict) or not isinstance(f.get("match"), dict):
            continue
        if f.get("filename", "eve.json") != "eve.json":
            continue
        if not requires_ok(f.get("requires"), version):
            continue
        m = f["match"]
        sid = m.get("alert.signature_id")
        if "alert.signature" in m and "alert.signature_id" not in m and rules:
            if by_msg is None:
                by_msg = sids_by_msg(rules)
            sid = by_msg.get(str(m["alert.signature"]))
        if not isinstance(sid, int) or isinstance(sid, bool):
            continue
        if set(m) - {"alert.signature_id", "alert.signature", "event_type"}:
            continue
        if m.get("event_type", "alert") != "alert":
            continue
        count = f.get("count")
        if isinstance(count, int) and not isinstance(count, bool):
            found[sid].add(count)
    return {sid: min(c) for sid, c in found.items() if len(c) == 1}


def prepare(test, version, mode, work):
    """Reads test.yaml and decides rules, capture and Suricata args (or why it is skipped)."""
    try:
        with open(os.path.join(test.path, "test.yaml"), encoding="utf-8",
                  errors="replace") as f:
            cfg = miniyaml.load(f.read()) or {}
    except (OSError, miniyaml.YamlError) as e:
        return test.skip("unreadable test.yaml", str(e))
    if not isinstance(cfg, dict):
        return test.skip("unreadable test.yaml", "not a mapping")
    test.cfg = cfg
    try:
        with open(os.path.join(test.path, "suricata.yaml"), encoding="utf-8",
                  errors="replace") as f:
            keys = re.findall(r"^([A-Za-z][\w.-]*):", f.read(), re.M)
        test.own_config = sorted(set(keys) - LOGGING_KEYS)
    except OSError:
        pass
    if "command" in cfg:
        return test.skip("custom command", "test.yaml gives its own command")
    # Rules, as run.py finds them.
    if "rules" in cfg:
        if not cfg["rules"]:
            return test.skip("no rules")
        rules = [os.path.normpath(os.path.join(test.path, str(cfg["rules"])))]
        if not os.path.exists(rules[0]):
            return test.skip("no rules", "rules file missing: " + str(cfg["rules"]))
    else:
        rules = sorted(os.path.join(test.path, n) for n in os.listdir(test.path)
                       if n.endswith(".rules"))
    if not rules:
        return test.skip("no rules")
    if len(rules) > 1 or rules[0].endswith("firewall.rules"):
        return test.skip("firewall rules", "firewall mode (firewall.rules + td.rules)")
    base = os.path.basename(rules[0])
    if base.startswith("min") and base.endswith(".rules"):
        return test.skip("no rules", "versioned rules file " + base)
    test.rules = rules[0]
    test.expected = expected_counts(cfg, version, test.rules)
    # Capture.
    requires = cfg.get("requires") if isinstance(cfg.get("requires"), dict) else {}
    if "pcap" in cfg and not cfg["pcap"] or requires.get("pcap") is False:
        return test.skip("no capture run", "pcap: false")
    if cfg.get("pcap"):
        pcaps = [os.path.normpath(os.path.join(test.path, str(cfg["pcap"])))]
    else:
        pcaps = sorted(os.path.join(test.path, n) for n in os.listdir(test.path)
                       if n.endswith((".pcap", ".pcapng")))
    if len(pcaps) > 1:
        return test.skip("no capture run", "more than one capture")
    if not pcaps or not os.path.exists(pcaps[0]) or is_lfs_pointer(pcaps[0]):
        return test.skip("capture missing", pcaps[0] if pcaps else "no *.pcap in the test")
    test.pcap = pcaps[0]
    keep, drop, no_run = split_args(cfg.get("args"), test, work)
    if no_run:
        return test.skip("no capture run", "args: " + " ".join(drop))
    ips = mode == "ips" or (mode == "auto" and ("ips" in test.name or any(
        "--simulate-ips" in str(a) for a in cfg.get("args") or [])))
    test.args = keep + (["--simulate-ips"] if ips else [])
    test.dropped_args = drop
    return test


# ---------------------------------------------------------------------------------------
# runs

def eve_counts(path, event_types=("alert",)):
    """sid -> number of alert events in an EVE file (missing file: empty)."""
    counts = collections.Counter()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("event_type") in event_types and isinstance(ev.get("alert"), dict):
                    sid = ev["alert"].get("signature_id")
                    if isinstance(sid, int):
                        counts[sid] += 1
    except OSError:
        pass
    return dict(counts)


def first_error(text):
    for line in text.splitlines():
        if re.search(r"error|Error|ERROR", line):
            return re.sub(r"\s+", " ", line.strip())[:300]
    lines = [x for x in text.splitlines() if x.strip()]
    return re.sub(r"\s+", " ", lines[-1].strip())[:300] if lines else ""


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def run_suricata(test, opts, work):
    """Runs Suricata on the test's capture (cached); sets test.suricata or a refusal."""
    argv = [opts.suricata, "-c", opts.suricata_config, "-r", test.pcap, "-S", test.rules,
            "-l", work, "-k", "none", "--init-errors-fatal"] + test.args + opts.suricata_arg
    # The work directory is a function of --out and the test, so argv is a stable key.
    key = hashlib.sha256(json.dumps([opts.suricata_version, argv, file_digest(test.rules),
                                     file_digest(test.pcap),
                                     opts.suricata_config_digest]).encode()).hexdigest()
    cache = os.path.join(opts.out, "cache", "suricata", key[:2], key + ".json")
    if not opts.no_cache and os.path.exists(cache):
        with open(cache) as f:
            res = json.load(f)
    else:
        for n in ("eve.json",):
            try:
                os.unlink(os.path.join(work, n))
            except FileNotFoundError:
                pass
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, cwd=test.path, capture_output=True, text=True,
                               errors="replace", timeout=opts.timeout)
            rc, out = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired:
            rc, out = -1, "timed out after %d s" % opts.timeout
        res = {"rc": rc, "error": first_error(out) if rc else "",
               "alerts": {str(k): v for k, v in eve_counts(os.path.join(work, "eve.json")).items()},
               "seconds": round(time.monotonic() - t0, 3)}
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        with open(cache + ".tmp", "w") as f:
            json.dump(res, f)
        os.replace(cache + ".tmp", cache)
    with open(os.path.join(work, "suricata.cmd"), "w") as f:
        f.write(" ".join(argv) + "\n")
    if res["rc"] != 0:
        return res["error"] or "exit status %d" % res["rc"]
    test.suricata = {int(k): v for k, v in res["alerts"].items()}
    return None


STATUS_COUNTER = re.compile(r"\b(alerts|eve_dropped)=(\d+)")


def run_relayd(test, opts, work):
    """Replays the capture through one `ids` service; sets test.relayd (or returns why not)."""
    eve = os.path.join(work, "relayd-eve.json")
    conf = os.path.join(work, "relayd.toml")
    try:
        os.unlink(eve)
    except FileNotFoundError:
        pass
    with open(conf, "w") as f:
        # --offload: the queue carries out the IDS's offload votes, as replay does live
        # (docs/replay.md): a flow's packets after its vote skip the chain.
        f.write('[[queue]]\nnum = 0\nhook = "forward"\nservices = ["ids"]\n')
        if opts.offload:
            f.write("offload = true\n")
        f.write('\n[service.ids]\nkind = "ids"\n')
        if opts.offload:
            f.write('tls_encryption_handling = "bypass"\n')
        f.write("rules = [%s]\n" % json.dumps(os.path.abspath(test.rules)))
        f.write("eve_log = %s\n" % json.dumps(eve))
        # Replay feeds the writer faster than a live queue: room for every alert of a
        # suricata-verify capture, so that no line is lost (eve_dropped is checked).
        f.write("strict = true\neve_queue = 262144\n")
        for k, v in sorted(test.relayd_conf.items()):
            f.write("%s = %s\n" % (k, json.dumps(v)))
        f.write("\n")
        f.write(opts.vars_toml)
    argv = [opts.relayd, "replay", "-c", conf, "--pcap", test.pcap]
    with open(os.path.join(work, "relayd.cmd"), "w") as f:
        f.write(" ".join(argv) + "\n")
    try:
        p = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                           timeout=opts.timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return "relayd error", "timed out after %d s" % opts.timeout
    if rc != 0 and "failed to load (strict)" in err:
        return "relayd refuses", first_error(err)
    if rc != 0 and not os.path.exists(eve):
        return "relayd error", first_error(err) or "exit status %d" % rc
    test.relayd = eve_counts(eve)
    if rc != 0:
        test.notes.append("replay failed: " + first_error(err))
    counters = dict((k, int(v)) for k, v in STATUS_COUNTER.findall(out))
    lines = sum(test.relayd.values())
    if counters.get("eve_dropped"):
        test.notes.append("eve_dropped=%d" % counters["eve_dropped"])
    if rc == 0 and "alerts" in counters and counters["alerts"] - counters.get(
            "eve_dropped", 0) != lines:
        # The EVE writer must have flushed everything by the time replay exits.
        test.notes.append("EVE lines %d != alerts counter %d (writer not flushed?)"
                          % (lines, counters["alerts"]))
    return None, None


def run_test(test, opts, accepted):
    work = os.path.join(opts.out, "work", test.id.replace(os.sep, "__"))
    os.makedirs(work, exist_ok=True)
    prepare(test, opts.expect_version, opts.mode, work)
    if test.status:
        return test
    if accepted.get(test.rules) != "ok":
        if opts.suricata_all:
            # Only to fill the cache (and time the worst case): not compared.
            run_suricata(test, opts, work)
            test.suricata = None
        return test.skip("relayd refuses", accepted.get(test.rules + "#why", ""))
    status, why = run_relayd(test, opts, work)
    if status:
        return test.skip(status, why)
    err = run_suricata(test, opts, work)
    if err:
        # relayd's counts still meet test.yaml's expectations (section 4).
        return test.skip("suricata refuses", err)
    test.status = "compared"
    return test


# ---------------------------------------------------------------------------------------
# acceptance

def rulecheck(opts, files):
    """Runs the rulecheck example over `files`; returns {path: 'ok'|'refused'|...}."""
    lst = os.path.join(opts.out, "rulecheck-files.txt")
    res = os.path.join(opts.out, "rulecheck.tsv")
    with open(lst, "w") as f:
        f.write("\n".join(files) + "\n")
    p = subprocess.run([opts.rulecheck, "--files-from", lst, "--list", res],
                       capture_output=True, text=True, errors="replace")
    if p.returncode != 0:
        sys.exit("rulecheck failed: " + p.stderr.strip())
    out = {}
    with open(res, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 2:
                continue
            out[parts[1]] = parts[0]
            if parts[0] == "refused" and len(parts) >= 4:
                out[parts[1] + "#kw"] = parts[2].split(",")
                out[parts[1] + "#why"] = parts[3]
            elif parts[0] == "unreadable" and len(parts) >= 3:
                out[parts[1] + "#why"] = parts[2]
    return out


# ---------------------------------------------------------------------------------------
# report

def pct(a, b):
    return "%.1f %%" % (100.0 * a / b) if b else "-"


def report(opts, rule_files, accepted, tests, elapsed):
    w = sys.stdout.write
    w("# IDS conformance: relayd vs suricata-verify and Suricata %s\n\n" % opts.suricata_version)
    w("Tree `%s`; relayd `%s`; Suricata mode `%s`; expectations for Suricata %s; "
      "filter `%s`; %.0f s.\n\n" % (opts.tree, opts.relayd, opts.mode, opts.expect_version_text,
                                    opts.filter or "-", elapsed))
    # 1. Acceptance.
    ok = [f for f in rule_files if accepted.get(f) == "ok"]
    w("## 1. Acceptance (`strict = true`, Suricata's default vars)\n\n")
    w("| test.rules files | loaded whole | share |\n|---:|---:|---:|\n")
    w("| %d | %d | %s |\n\n" % (len(rule_files), len(ok), pct(len(ok), len(rule_files))))
    by_kw, alone = collections.Counter(), collections.Counter()
    for f in rule_files:
        kws = accepted.get(f + "#kw")
        if accepted.get(f) == "refused" and kws:
            by_kw.update(kws)
            if len(kws) == 1:
                alone[kws[0]] += 1
    if by_kw:
        w("| refusing keyword | files refused by it | by it alone |\n|---|---:|---:|\n")
        for k, n in sorted(by_kw.items(), key=lambda x: (-x[1], x[0]))[:opts.top]:
            w("| `%s` | %d | %d |\n" % (k, n, alone[k]))
        w("\n")
    # 2. Tests.
    statuses = collections.Counter(t.status for t in tests)
    w("## 2. Tests\n\n| status | tests |\n|---|---:|\n")
    order = ["compared", "suricata refuses", "relayd refuses", "relayd error", "capture missing",
             "no capture run", "custom command", "no rules", "firewall rules",
             "unreadable test.yaml"]
    for s in order + sorted(set(statuses) - set(order)):
        if statuses.get(s):
            w("| %s | %d |\n" % (s, statuses[s]))
    w("| **all** | %d |\n\n" % len(tests))
    # 3. Agreement with Suricata.
    compared = [t for t in tests if t.status == "compared"]
    pairs = agree = full = silent = 0
    for t in compared:
        sids = set(t.suricata) | set(t.relayd)
        same = sum(1 for s in sids if t.suricata.get(s, 0) == t.relayd.get(s, 0))
        pairs += len(sids)
        agree += same
        full += same == len(sids)
        silent += not sids
    w("## 3. Agreement with Suricata %s\n\n" % opts.suricata_version)
    w("| (test, sid) pairs | counts agree | share | tests compared | agreeing fully "
      "| of which silent on both sides |\n|---:|---:|---:|---:|---:|---:|\n")
    w("| %d | %d | %s | %d | %d (%s) | %d |\n\n" % (pairs, agree, pct(agree, pairs), len(compared),
                                                   full, pct(full, len(compared)), silent))
    # 4. Agreement with test.yaml.
    ran = [t for t in tests if t.relayd is not None]
    w("## 4. Agreement with test.yaml's expected counts (relayd ran: %d tests)\n\n" % len(ran))
    w("Expectations are for the test's own configuration; \"plain\" leaves out the tests "
      "whose suricata.yaml sets more than logging or whose `--set` args were dropped "
      "(threshold files, action-order, vars, ...).\n\n")
    w("| | tests | (test, sid) pairs with an expected count | agree | share |\n"
      "|---|---|---:|---:|---:|\n")
    for subset, name in ((ran, "all"), ([t for t in ran if t.plain()], "plain")):
        e_pairs = e_relayd = s_pairs = s_agree = 0
        for t in subset:
            for sid, n in t.expected.items():
                e_pairs += 1
                e_relayd += t.relayd.get(sid, 0) == n
                if t.suricata is not None:
                    s_pairs += 1
                    s_agree += t.suricata.get(sid, 0) == n
        w("| relayd | %s | %d | %d | %s |\n" % (name, e_pairs, e_relayd, pct(e_relayd, e_pairs)))
        w("| Suricata %s (where it ran) | %s | %d | %d | %s |\n" % (
            opts.suricata_version, name, s_pairs, s_agree, pct(s_agree, s_pairs)))
    w("\n")
    # Disagreements, biggest first.
    rows = []
    for t in compared:
        sids = set(t.suricata) | set(t.relayd)
        bad = [s for s in sids if t.suricata.get(s, 0) != t.relayd.get(s, 0)]
        if bad:
            rows.append((len(bad), t))
    if rows:
        w("## Tests that disagree (%d; first %d by number of sids)\n\n" % (len(rows), opts.top))
        w("| test | sid: suricata/relayd |\n|---|---|\n")
        for _, t in sorted(rows, key=lambda x: (-x[0], x[1].id))[:opts.top]:
            sids = sorted(set(t.suricata) | set(t.relayd))
            cell = ", ".join("%d: %d/%d" % (s, t.suricata.get(s, 0), t.relayd.get(s, 0))
                             for s in sids if t.suricata.get(s, 0) != t.relayd.get(s, 0))
            w("| %s | %s |\n" % (t.id, cell[:200]))
        w("\n")
    notes = [t for t in tests if t.notes]
    if notes:
        w("## Notes (%d tests)\n\n" % len(notes))
        for t in notes[:opts.top]:
            w("- %s: %s\n" % (t.id, "; ".join(t.notes)))
        w("\n")
    w("Per (test, sid): `%s`; per test: `%s`.\n" % (opts.results, opts.tests_tsv))


def write_tsv(opts, tests):
    with open(opts.results, "w") as f:
        f.write("test\tsid\tsuricata\trelayd\texpected\n")
        for t in tests:
            if t.relayd is None and t.suricata is None:
                continue
            sids = set(t.relayd or {}) | set(t.suricata or {}) | set(t.expected)
            for s in sorted(sids):
                def cell(d):
                    return "-" if d is None else str(d.get(s, 0))
                f.write("%s\t%d\t%s\t%s\t%s\n" % (t.id, s, cell(t.suricata), cell(t.relayd),
                                                   t.expected.get(s, "-")))
    with open(opts.tests_tsv, "w") as f:
        f.write("test\tstatus\tsuricata_alerts\trelayd_alerts\tagree\tdetail\n")
        for t in tests:
            s = "-" if t.suricata is None else sum(t.suricata.values())
            r = "-" if t.relayd is None else sum(t.relayd.values())
            agree = "-"
            if t.status == "compared":
                agree = "yes" if t.suricata == t.relayd else "no"
            detail = "; ".join(x for x in [t.detail] + t.notes + (
                ["dropped args: " + " ".join(t.dropped_args)] if t.dropped_args else []) + (
                ["own suricata.yaml: " + ",".join(t.own_config)] if t.own_config else []) + (
                ["relayd: " + ", ".join("%s = %s" % (k, json.dumps(v)) for k, v in
                                        sorted(t.relayd_conf.items()))]
                if t.relayd_conf else []) if x)
            f.write("%s\t%s\t%s\t%s\t%s\t%s\n" % (t.id, t.status, s, r, agree,
                                                  detail.replace("\t", " ")))


# ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", required=True, help="suricata-verify (or its tests/ directory)")
    ap.add_argument("--relayd", required=True, help="the relayd binary")
    ap.add_argument("--rulecheck", required=True, help="the rulecheck example binary")
    ap.add_argument("--suricata", default="suricata")
    ap.add_argument("--suricata-config", default="/etc/suricata/suricata.yaml",
                    help="Suricata's full default configuration (tests' own are not used)")
    ap.add_argument("--out", required=True, help="work directory (results, cache)")
    ap.add_argument("--filter", help="regular expression on the test path (e.g. '^alert-')")
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--mode", choices=["ips", "ids", "auto"], default="auto",
                    help="Suricata with --simulate-ips always (ips, default: relayd is "
                         "inline), never (ids), or as suricata-verify does (auto)")
    ap.add_argument("--suricata-arg", action="append", default=[], metavar="ARG",
                    help="an extra Suricata argument, after the test's (repeatable; "
                         "--suricata-arg=--set --suricata-arg=stream.inline=no)")
    ap.add_argument("--expect-version", default=DEFAULT_EXPECT_VERSION,
                    help="the Suricata version test.yaml requirements are evaluated for")
    ap.add_argument("--no-cache", action="store_true", help="re-run Suricata")
    ap.add_argument("--offload", action="store_true",
                    help="relayd's queue offloads (offload = true, TLS encryption bypass): "
                    "what the offloaded packets would have matched is lost, as live")
    ap.add_argument("--suricata-all", action="store_true",
                    help="run Suricata also where relayd refuses the rules (fills the cache "
                         "for every test; nothing more is compared)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run")
    ap.add_argument("--top", type=int, default=25, help="rows in the summary's lists")
    opts = ap.parse_args()

    t0 = time.monotonic()
    tree = os.path.abspath(opts.tree)
    tests_dir = os.path.join(tree, "tests") if os.path.isdir(os.path.join(tree, "tests")) else tree
    if not os.path.isdir(tests_dir):
        sys.exit("error: %s is not a suricata-verify tree (no tests/ directory)" % tree)
    opts.tree = tree
    for b in ("relayd", "rulecheck"):
        path = getattr(opts, b)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            sys.exit("error: %s binary %s not found" % (b, path))
        setattr(opts, b, os.path.abspath(path))
    if not shutil.which(opts.suricata):
        sys.exit("error: suricata not found (install it: apt-get install suricata)")
    if not os.path.isfile(opts.suricata_config):
        sys.exit("error: Suricata configuration %s not found" % opts.suricata_config)
    v = subprocess.run([opts.suricata, "-V"], capture_output=True, text=True)
    m = re.search(r"version (\S+)", v.stdout + v.stderr)
    opts.suricata_version = m.group(1) if m else "?"
    opts.suricata_config_digest = file_digest(opts.suricata_config)
    opts.expect_version_text = opts.expect_version
    opts.expect_version = parse_version(opts.expect_version, 999)
    opts.out = os.path.abspath(opts.out)
    os.makedirs(opts.out, exist_ok=True)
    shutil.rmtree(os.path.join(opts.out, "work"), ignore_errors=True)
    opts.results = os.path.join(opts.out, "results.tsv")
    opts.tests_tsv = os.path.join(opts.out, "tests.tsv")
    opts.vars_toml = subprocess.run([opts.rulecheck, "--vars-toml"], capture_output=True,
                                    text=True, check=True).stdout

    # Acceptance over every test.rules (filtered), plus the rules files tests point at.
    test_dirs = discover(tests_dir, opts.filter)
    rule_files = []
    for dirpath, dirnames, filenames in os.walk(tests_dir, followlinks=True):
        dirnames.sort()
        if "test.rules" in filenames:
            rel = os.path.relpath(dirpath, tests_dir)
            if not opts.filter or re.search(opts.filter, rel):
                rule_files.append(os.path.join(dirpath, "test.rules"))
    rule_files.sort()
    tests = [Test(tests_dir, d) for d in test_dirs]
    used = set(rule_files)
    for t in tests:
        for n in os.listdir(t.path):
            if n.endswith(".rules"):
                used.add(os.path.join(t.path, n))
    for t in tests:
        # Rules named in test.yaml are found by prepare(); check them all up front.
        try:
            with open(os.path.join(t.path, "test.yaml"), encoding="utf-8",
                      errors="replace") as f:
                m = re.search(r"^rules:\s*(\S+)", f.read(), re.M)
            if m:
                p = os.path.normpath(os.path.join(t.path, m.group(1).strip("'\"")))
                if os.path.exists(p):
                    used.add(p)
        except OSError:
            pass
    accepted = rulecheck(opts, sorted(used))
    log("acceptance: %d of %d test.rules files load whole; %d tests to judge" % (
        sum(accepted.get(f) == "ok" for f in rule_files), len(rule_files), len(tests)))

    done = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        for _ in pool.map(lambda t: run_test(t, opts, accepted), tests):
            done += 1
            if done % 100 == 0:
                log("%d of %d tests (%.0f s)" % (done, len(tests), time.monotonic() - t0))
    write_tsv(opts, tests)
    report(opts, rule_files, accepted, tests, time.monotonic() - t0)


if __name__ == "__main__":
    main()
