#!/usr/bin/env bash
# `loom ckpt show` on real LeNet training checkpoints (256 training images = 8 steps of 32,
# --deterministic):
#  - the header (file, size in bytes, 25 entries), the entry lines ('conv1.weight Float32
#    (6, 1, 5, 5) 150 <crc>', the moments.* states, one-element values), the training state
#    (epoch 1, step 8, seed 1, resume position, Momentum) and the summary;
#  - every CRC-32 equals zlib.crc32 of the tensor's bytes read from the file by an independent
#    protobuf walk in Python (text and --json);
#  - the output is the same twice; the epoch-1 checkpoint of a 2-epoch run has the same CRCs, its
#    epoch-2 checkpoint a different conv1.weight CRC;
#  - a copy with the parameters only says so; without loom's entries (as MindSpore writes a
#    training checkpoint) the optimizer is inferred from the moments.* states;
#  - errors: truncated copy, non-checkpoint file, missing file, name without .ckpt: exit 1 and
#    the message of `loom eval --ckpt` naming the file; unknown option / subcommand: exit 2.
# Usage: ckpt_show_test.sh path/to/loom
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
train=(train lenet --train-samples 256 --test-samples 64 --deterministic --threads 2)

"$loom" "${train[@]}" --epochs 1 --ckpt-dir "$tmp/a" >"$tmp/train_a.out" 2>&1 ||
  { cat "$tmp/train_a.out" >&2; fail "loom train (1 epoch) exited non-zero"; }
"$loom" "${train[@]}" --epochs 2 --ckpt-dir "$tmp/b" >"$tmp/train_b.out" 2>&1 ||
  { cat "$tmp/train_b.out" >&2; fail "loom train (2 epochs) exited non-zero"; }
ck=$tmp/a/lenet-1_8.ckpt
[[ -f $ck && -f $tmp/b/lenet-1_8.ckpt && -f $tmp/b/lenet-2_8.ckpt ]] ||
  { ls -l "$tmp/a" "$tmp/b" >&2; fail "expected lenet-1_8.ckpt and lenet-2_8.ckpt"; }

# show FILE NAME [ARGS]: loom ckpt show FILE ARGS into $tmp/NAME.out, exit status 0 required.
show() {
  local file=$1 name=$2
  shift 2
  "$loom" ckpt show "$file" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    { cat "$tmp/$name.out" "$tmp/$name.err" >&2; fail "loom ckpt show $file $* exited non-zero"; }
}
# has NAME REGEX: a line of NAME's output matches (extended regex, spaces squeezed).
has() {
  tr -s ' ' <"$tmp/$1.out" | grep -qE -- "$2" ||
    { cat "$tmp/$1.out" >&2; fail "$1: no line matching '$2'"; }
}
# crcs NAME: "entry crc32" for every tensor line of NAME's output; crc NAME ENTRY: ENTRY's crc32.
crcs() {
  sed -nE '/^training state/q; s/^  ([^ ]+) +[A-Za-z0-9]+ +\([^)]*\) +[0-9]+ +([0-9a-f]{8})( .*)?$/\1 \2/p' \
    "$tmp/$1.out"
}
crc() { crcs "$1" | awk -v n="$2" '$1 == n { print $2 }'; }

# The checkpoint's records, read independently: python3 ckpt.py crc FILE prints "tag crc32" per
# tensor (chunks of a tag concatenated); ckpt.py filter IN OUT MODE writes the records of IN that
# MODE keeps (params: no optimizer / run entries; no-loom: without loom.*).
cat >"$tmp/ckpt.py" <<'EOF'
import sys, zlib

def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7F) << s; s += 7
        if c < 0x80:
            return v, i

def fields(b):  # (field number, wire type, value) of a message
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        else:
            raise SystemExit("unexpected wire type %d" % w)
        yield f, w, v

def records(b):  # (tag, tensor_type, content bytes, raw record bytes)
    i = 0
    while i < len(b):
        start = i
        key, i = varint(b, i)
        assert key == 0x0A, key
        n, i = varint(b, i)
        value = b[i:i + n]; i += n
        tag = ttype = None; content = b""
        for f, w, v in fields(value):
            if f == 1:
                tag = v.decode()
            elif f == 2:
                for f2, w2, v2 in fields(v):
                    if f2 == 2: ttype = v2.decode()
                    if f2 == 3: content = v2
        yield tag, ttype, content, b[start:i]

data = open(sys.argv[2], "rb").read()
if sys.argv[1] == "crc":
    crcs = {}
    order = []
    for tag, ttype, content, _ in records(data):
        if ttype == "str":
            continue
        if tag not in crcs:
            order.append(tag); crcs[tag] = 0
        crcs[tag] = zlib.crc32(content, crcs[tag])
    for tag in order:
        print(tag, "%08x" % crcs[tag])
else:
    optim = ("global_step", "learning_rate", "momentum", "epoch_num", "step_num")
    keep = []
    for tag, ttype, content, raw in records(data):
        if sys.argv[4] == "params" and (tag.startswith(("moments.", "loom.")) or tag in optim):
            continue
        if sys.argv[4] == "no-loom" and tag.startswith("loom."):
            continue
        keep.append(raw)
    open(sys.argv[3], "wb").write(b"".join(keep))
EOF

# --- The listing.
show "$ck" a
show "$ck" a2
cmp -s "$tmp/a.out" "$tmp/a2.out" || fail "two runs of loom ckpt show differ"
size=$(stat -c %s "$ck")
[[ $(head -n 1 "$tmp/a.out") == "$ck: $size bytes, 25 entries (24 tensors, 1 string)" ]] ||
  fail "header: '$(head -n 1 "$tmp/a.out")', expected '$ck: $size bytes, 25 entries (24 tensors, 1 string)'"
has a '^ name dtype shape elements crc32 value$'
has a '^ conv1.weight Float32 \(6, 1, 5, 5\) 150 [0-9a-f]{8}$'
has a '^ fc1.weight Float32 \(120, 400\) 48000 [0-9a-f]{8}$'
has a '^ moments.conv1.weight Float32 \(6, 1, 5, 5\) 150 [0-9a-f]{8}$'
has a '^ global_step Int32 \(1\) 1 [0-9a-f]{8} 8$'
has a '^ learning_rate Float32 \(\) 1 [0-9a-f]{8} 0.01$'
has a '^ momentum Float32 \(\) 1 [0-9a-f]{8} 0.9$'
has a '^ epoch_num Int64 \(\) 1 [0-9a-f]{8} 1$'
has a '^ loom.optimizer str - - - "Momentum"$'
has a '^training state:$'
has a '^ epoch 1 \(epoch_num\)$'
has a '^ step 8 \(step_num\)$'
has a '^ global_step 8$'
has a '^ seed 1 \(loom.seed\)$'
has a '^ resumes at epoch 2, batch 0 of it \(loom.data_epoch 1, loom.data_index 0\)$'
has a '^ optimizer Momentum \(loom.optimizer; states: moments\)$'
has a '^ learning_rate 0.01$'
has a '^ parameters 8 tensors 61684 values$'
has a '^ optimizer states 8 tensors 61684 values moments$'
has a '^ optimizer scalars 3 tensors 3 values global_step, learning_rate, momentum$'
echo "listing: ok"

# --- The CRCs: every tensor's, against zlib.crc32 over its bytes in the file.
python3 "$tmp/ckpt.py" crc "$ck" >"$tmp/want_crc"
[[ $(wc -l <"$tmp/want_crc") == 24 ]] || { cat "$tmp/want_crc" >&2; fail "python read no 24 tensors"; }
crcs a >"$tmp/got_crc"
diff "$tmp/want_crc" "$tmp/got_crc" >&2 || fail "CRCs differ from zlib.crc32 of the tensor bytes"
show "$ck" json --json
python3 - "$tmp/json.out" "$tmp/want_crc" "$ck" "$size" <<'EOF' || fail "--json"
import json, sys
j = json.load(open(sys.argv[1]))
want = dict(l.split() for l in open(sys.argv[2]))
assert j["file"] == sys.argv[3] and j["bytes"] == int(sys.argv[4]), (j["file"], j["bytes"])
assert len(j["entries"]) == 25, len(j["entries"])
got = {e["name"]: e["crc32"] for e in j["entries"] if "crc32" in e}
assert got == want, (got, want)
e = j["entries"][0]
assert (e["name"], e["dtype"], e["shape"], e["elements"], e["kind"]) == \
    ("conv1.weight", "Float32", [6, 1, 5, 5], 150, "parameter"), e
s = j["training_state"]
assert (s["epoch_num"], s["step_num"], s["global_step"], s["seed"], s["data_epoch"],
        s["data_index"], s["optimizer"]) == (1, 8, 8, 1, 1, 0, "Momentum"), s
assert j["summary"]["parameters"] == {"entries": 8, "values": 61684}, j["summary"]
assert j["summary"]["optimizer_states"] == {"entries": 8, "values": 61684}, j["summary"]
EOF
echo "crc32 (text and --json): ok ($(crc a conv1.weight))"

# --- Between files: the same training state, the same CRCs; one epoch later, others.
show "$tmp/b/lenet-1_8.ckpt" b1
show "$tmp/b/lenet-2_8.ckpt" b2
diff <(tail -n +2 "$tmp/a.out") <(tail -n +2 "$tmp/b1.out") >&2 ||
  fail "the epoch-1 checkpoints of two deterministic runs list differently"
[[ $(crc b2 conv1.weight) != "$(crc a conv1.weight)" ]] ||
  fail "conv1.weight's CRC did not change after another epoch"
has b2 '^ epoch 2 \(epoch_num\)$'
has b2 '^ global_step 16$'
echo "between files: ok ($(crc a conv1.weight) -> $(crc b2 conv1.weight))"

# --- Parameters only, and a checkpoint without loom's entries (as MindSpore writes them).
python3 "$tmp/ckpt.py" filter "$ck" "$tmp/params.ckpt" params
show "$tmp/params.ckpt" params
has params '^'"$tmp"'/params.ckpt: [0-9]+ bytes, 8 entries \(8 tensors, 0 strings\)$'
has params '^ name dtype shape elements crc32$'
has params '^training state: none \(parameters only'
has params '^ parameters 8 tensors 61684 values$'
[[ $(crc params conv1.weight) == "$(crc a conv1.weight)" ]] || fail "params-only conv1.weight CRC"
python3 "$tmp/ckpt.py" filter "$ck" "$tmp/ms.ckpt" no-loom
show "$tmp/ms.ckpt" ms
has ms '^ optimizer Momentum \(inferred from its states; states: moments\)$'
has ms '^ seed not recorded'
echo "parameters only / no loom entries: ok"

# --- Errors.
# bad NAME FILE STATUS: loom ckpt show FILE exits STATUS, its stderr in $tmp/NAME.err.
bad() {
  local name=$1 file=$2 want=$3 status=0
  "$loom" ckpt show "$file" >"$tmp/$name.out" 2>"$tmp/$name.err" || status=$?
  [[ $status == "$want" ]] || { cat "$tmp/$name.err" >&2; fail "$name: exit $status, expected $want"; }
  grep -qF -- "$file" "$tmp/$name.err" || { cat "$tmp/$name.err" >&2; fail "$name: message without the file"; }
  grep -q '^loom ckpt: ' "$tmp/$name.err" || { cat "$tmp/$name.err" >&2; fail "$name: no 'loom ckpt: '"; }
}
head -c 300000 "$ck" >"$tmp/trunc.ckpt"
bad trunc "$tmp/trunc.ckpt" 1
grep -q 'truncated' "$tmp/trunc.err" || { cat "$tmp/trunc.err" >&2; fail "truncated: message"; }
# The same message as `loom eval --ckpt`.
status=0
"$loom" eval lenet --ckpt "$tmp/trunc.ckpt" --test-samples 64 >/dev/null 2>"$tmp/eval.err" || status=$?
[[ $status == 1 ]] || fail "loom eval --ckpt truncated: exit $status"
[[ $(sed 's/^loom eval: //' "$tmp/eval.err") == $(sed 's/^loom ckpt: //' "$tmp/trunc.err") ]] ||
  { cat "$tmp/eval.err" "$tmp/trunc.err" >&2; fail "loom ckpt and loom eval --ckpt differ"; }
printf 'this is not a checkpoint\n' >"$tmp/text.ckpt"
bad text "$tmp/text.ckpt" 1
grep -q 'not a MindSpore checkpoint' "$tmp/text.err" || { cat "$tmp/text.err" >&2; fail "text: message"; }
bad missing "$tmp/missing.ckpt" 1
bad noext "$tmp/ckpt.py" 1
: >"$tmp/empty.ckpt"
bad empty "$tmp/empty.ckpt" 1
echo "bad files: ok ($(cat "$tmp/trunc.err"))"

# usage STATUS ARGS...: loom ckpt ARGS exits STATUS.
usage() {
  local want=$1 status=0
  shift
  "$loom" ckpt "$@" >"$tmp/usage.out" 2>"$tmp/usage.err" || status=$?
  [[ $status == "$want" ]] || { cat "$tmp/usage.err" >&2; fail "loom ckpt $*: exit $status, expected $want"; }
}
usage 2 show "$ck" --bogus
grep -qF "unknown option '--bogus'" "$tmp/usage.err" || fail "--bogus: message"
usage 2 list "$ck"
usage 2 show
usage 2 show "$ck" "$ck"
usage 2
usage 0 --help
grep -q '^usage: loom ckpt show FILE.ckpt' "$tmp/usage.out" || fail "--help text"
usage 0 show --help
echo "usage errors: ok"
echo "PASS"
