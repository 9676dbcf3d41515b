#!/usr/bin/env bash
# cli_test.sh LOOM: `loom export lenet` (initial weights), `loom mindir show` and `loom run` on a
# hand-made .npy (with and without --output), and the exit statuses of usage and file errors.
set -eu
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

grep -q "exported lenet (input Float32 (2, 1, 32, 32))" <<<"$("$loom" export lenet --output "$tmp/lenet.mindir" --batch 2)"
show=$("$loom" mindir show "$tmp/lenet.mindir")
for want in "producer loom" "x0  Float32 (2, 1, 32, 32)" "Conv2D  2" "MatMul  3" "fc3.bias  Float32 (10)" "8 parameters, 61684 values"; do
  grep -qF "$want" <<<"$show" || { echo "mindir show: missing '$want'"; echo "$show"; exit 1; }
done

# A (3, 1, 32, 32) float32 .npy of zeros: version 1.0, header padded to a multiple of 64 bytes.
header="{'descr': '<f4', 'fortran_order': False, 'shape': (3, 1, 32, 32), }"
hlen=$(( (10 + ${#header} + 1 + 63) / 64 * 64 - 10 ))
pad=$((hlen - ${#header} - 1))
{ printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x "$hlen")\\x00"; printf '%s' "$header";
  printf '%*s' "$pad" ''; printf '\n'; head -c $((3 * 1024 * 4)) /dev/zero; } > "$tmp/x.npy"
grep -qF "wrote Float32 (3, 10)" <<<"$("$loom" run "$tmp/lenet.mindir" --input "$tmp/x.npy" --output "$tmp/y.npy")"
[ "$(head -c 6 "$tmp/y.npy" | tail -c 5)" = "NUMPY" ]
grep -qF "Float32 (3, 10)" <<<"$("$loom" run "$tmp/lenet.mindir" --input "$tmp/x.npy")"
# --repeat: the output as without it, then one latency line over exactly N timed calls.
timed=$("$loom" run "$tmp/lenet.mindir" --input "$tmp/x.npy" --repeat 7 --warmup 2)
grep -qF "Float32 (3, 10)" <<<"$timed" || { echo "run --repeat: no output line"; echo "$timed"; exit 1; }
grep -qE '^latency: 7 runs, median [0-9]+\.[0-9] us, min [0-9]+\.[0-9] us, p90 [0-9]+\.[0-9] us, mean [0-9]+\.[0-9] us$' <<<"$timed" ||
  { echo "run --repeat: expected the latency line"; echo "$timed"; exit 1; }

# A batch size other than the exported one runs (above: 3 against 2); an image size the network
# cannot take is one message naming the file, its shape and the model's input (exit 1).
header="{'descr': '<f4', 'fortran_order': False, 'shape': (3, 1, 28, 28), }"
hlen=$(( (10 + ${#header} + 1 + 63) / 64 * 64 - 10 ))
pad=$((hlen - ${#header} - 1))
{ printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x "$hlen")\\x00"; printf '%s' "$header";
  printf '%*s' "$pad" ''; printf '\n'; head -c $((3 * 784 * 4)) /dev/zero; } > "$tmp/x28.npy"
set +e
err=$("$loom" run "$tmp/lenet.mindir" --input "$tmp/x28.npy" 2>&1 >/dev/null); rc=$?
set -e
[ $rc -eq 1 ] || { echo "run x28: expected exit 1, got $rc"; exit 1; }
want="loom run: $tmp/x28.npy holds Float32 (3, 1, 28, 28), but $tmp/lenet.mindir's input 'x0' is Float32 (2, 1, 32, 32): "
[ "${err#"$want"}" != "$err" ] || { echo "run x28: expected '$want...', got '$err'"; exit 1; }

set +e
"$loom" export lenet >/dev/null 2>&1; [ $? -eq 2 ] || { echo "export without --output: expected 2"; exit 1; }
"$loom" run "$tmp/missing.mindir" --input "$tmp/x.npy" >/dev/null 2>&1; [ $? -eq 1 ] || { echo "run missing: expected 1"; exit 1; }
for bad in "--repeat 0" "--repeat x" "--repeat 3 --warmup -1" "--warmup 3"; do
  # shellcheck disable=SC2086
  "$loom" run "$tmp/lenet.mindir" --input "$tmp/x.npy" $bad >/dev/null 2>&1
  [ $? -eq 2 ] || { echo "run $bad: expected 2"; exit 1; }
done
"$loom" mindir show >/dev/null 2>&1; [ $? -eq 2 ] || { echo "mindir without args: expected 2"; exit 1; }
printf 'garbage' > "$tmp/bad.mindir"
"$loom" mindir show "$tmp/bad.mindir" >/dev/null 2>&1; [ $? -eq 1 ] || { echo "show garbage: expected 1"; exit 1; }
echo "cli ok"
