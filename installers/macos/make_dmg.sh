#!/usr/bin/env bash
# The macOS disk image: dist/FastMTP-Chat-<version>.dmg holding "FastMTP Chat.app" and a link to
# /Applications, so the user drags the one onto the other. Run on macOS after
# `python installers/build.py` (which makes dist/FastMTP Chat.app); sign and notarize as
# installers/README.md says.
#
#   installers/macos/make_dmg.sh [APP] [OUT.dmg]
#   installers/macos/make_dmg.sh --stage DIR [APP]   # only lay out the image's folder in DIR (no hdiutil)
#
# --stage is what the tests run on Linux; hdiutil exists only on macOS.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
NAME="FastMTP Chat"
STAGE_ONLY=""
if [[ "${1:-}" == "--stage" ]]; then
    STAGE_ONLY="${2:?--stage needs a folder}"
    shift 2
fi
VERSION="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/app/__init__.py")"
APP="${1:-$ROOT/dist/$NAME.app}"
OUT="${2:-$ROOT/dist/FastMTP-Chat-$VERSION.dmg}"

if [[ ! -f "$APP/Contents/Info.plist" ]]; then
    echo "make_dmg: $APP is not an app bundle; build it first: python installers/build.py" >&2
    exit 1
fi
if [[ -z "$STAGE_ONLY" ]] && ! command -v hdiutil >/dev/null; then
    echo "make_dmg: hdiutil was not found; disk images are made on macOS" >&2
    exit 1
fi

if [[ -n "$STAGE_ONLY" ]]; then
    STAGE="$STAGE_ONLY"
    mkdir -p "$STAGE"
else
    STAGE="$(mktemp -d)"
    trap 'rm -rf "$STAGE"' EXIT
fi
if command -v ditto >/dev/null; then
    ditto "$APP" "$STAGE/$NAME.app"  # keeps extended attributes and the code signature intact
else
    cp -R "$APP" "$STAGE/$NAME.app"
fi
ln -s /Applications "$STAGE/Applications"
if [[ -n "$STAGE_ONLY" ]]; then
    echo "staged: $STAGE"
    exit 0
fi

mkdir -p "$(dirname "$OUT")"
# hdiutil fails now and then on hosted Macs ("Resource busy" while a Spotlight or XProtect scan holds the
# image): try again a few times, with a growing pause, before giving up (HDIUTIL_TRIES, HDIUTIL_PAUSE seconds).
TRIES="${HDIUTIL_TRIES:-5}"
for try in $(seq 1 "$TRIES"); do
    if hdiutil create -volname "$NAME $VERSION" -srcfolder "$STAGE" -fs HFS+ -format UDZO -ov "$OUT"; then
        echo "disk image: $OUT"
        exit 0
    fi
    echo "make_dmg: hdiutil failed (try $try of $TRIES)" >&2
    if [[ "$try" -lt "$TRIES" ]]; then sleep $((try * ${HDIUTIL_PAUSE:-10})); fi
done
echo "make_dmg: hdiutil failed $TRIES times; no disk image was made" >&2
exit 1
