#!/usr/bin/env bash
# Ready when the node answers a CQL OPTIONS request (protocol v4 frame) with SUPPORTED: a
# protocol round trip on the address it serves, not just an open port.
set -euo pipefail
exec 3<>"/dev/tcp/$(hostname -i | awk '{print $1}')/9042"
printf '\x04\x00\x00\x00\x05\x00\x00\x00\x00' >&3
header="$(timeout 5 head -c 5 <&3 | od -An -tx1 | tr -d ' \n')"
[[ "${header}" == 8400000006 ]]
