#!/bin/sh
# Fetch the papers' official repositories at the commits bench/compare_official.py was checked against, into
# DEST/{gma,refiner,msf,flatten}, and the plain hosts' (DEST/{pvt,cswin,nextvit}) for bench/check_official.py, all
# outside vitc's tree (nothing of them is committed to vitc). Prints the --repo options. GIT_BASE (default
# https://github.com) names another host or a local mirror.
# Usage: bench/fetch_official.sh DEST
set -eu
[ $# -eq 1 ] || { echo "usage: $0 DEST" >&2; exit 2; }
dest=$1
base=${GIT_BASE:-https://github.com}
mkdir -p "$dest"

fetch() { # NAME OWNER/REPO COMMIT
    dir=$dest/$1
    if [ ! -d "$dir/.git" ]; then
        git init -q "$dir"
        git -C "$dir" remote add origin "$base/$2"
    fi
    # one commit, shallow; a server that refuses fetching by hash gets a full fetch
    git -C "$dir" fetch -q --depth 1 origin "$3" 2>/dev/null || git -C "$dir" fetch -q origin
    git -C "$dir" -c advice.detachedHead=false checkout -q "$3"
    echo "$1: $2 @ $(git -C "$dir" rev-parse --short HEAD)" >&2
}

fetch gma AILab-CVC/GroupMixFormer 3d3f40977c6aa9f5d9eb3d6ffb53cc9c648cf7b2
fetch refiner zhoudaquan/Refiner_ViT b3e8cb0c41524af6f501785f47eda691c85f25e4
fetch msf tk1980/MSFtransformer ce23d1f432bd2b75ec074d1eb76a690d2f7802de
fetch flatten LeapLabTHU/FLatten-Transformer abdb115f5406c0e1b6864aad7fe998a3f424ae76
# the plain hosts' official code, for bench/check_official.py only
fetch pvt whai362/PVT 57e2dfaa5a46f9050d76f306a4fcd9a7c061f520
fetch cswin microsoft/CSWin-Transformer f111ae2f771df32006e7afd7916835dd67d4cb9d
fetch nextvit bytedance/Next-ViT 922e771ae6028b9d956e2622a984459a50aa63d4

echo "--repo gma=$dest/gma --repo refiner=$dest/refiner --repo msf=$dest/msf --repo flatten=$dest/flatten"
echo "check_official.py also: --repo pvt=$dest/pvt --repo cswin=$dest/cswin --repo nextvit=$dest/nextvit"
