#!/bin/sh
# Writes a few small valid safetensors files into the fuzz seed corpus directory $1.
set -e
dir=$1
mkdir -p "$dir"
# seed NAME HEADER DATA: u64 LE header length (< 65536), header, then data bytes (printf octal escapes).
seed() {
    n=$(printf %s "$2" | wc -c)
    printf "\\$(printf %03o $((n % 256)))\\$(printf %03o $((n / 256)))\\000\\000\\000\\000\\000\\000" > "$dir/$1"
    printf %s "$2" >> "$dir/$1"
    printf "$3" >> "$dir/$1"
}
seed empty '{}      ' ''
seed meta '{"__metadata__":{"format":"pt"}}' ''
seed f32 '{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' '\000\000\200\077\000\000\000\300'
seed mixed '{"__metadata__":{"k":"v"},"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[1,1],"data_offsets":[4,6]},"i":{"dtype":"I64","shape":[],"data_offsets":[6,14]},"u":{"dtype":"U8","shape":[0],"data_offsets":[14,14]}}' '\000\074\000\300\200\077\007\000\000\000\000\000\000\000'
seed ints '{"a":{"dtype":"I32","shape":[1],"data_offsets":[4,8]},"b":{"dtype":"BOOL","shape":[2],"data_offsets":[8,10]},"c":{"dtype":"F64","shape":[],"data_offsets":[10,18]},"d":{"dtype":"I8","shape":[2,2],"data_offsets":[0,4]},"e":{"dtype":"I16","shape":[1],"data_offsets":[18,20]}}' '\001\002\003\004\005\000\000\000\001\000\000\000\000\000\000\000\360\077\377\377'
