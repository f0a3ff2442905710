"""What runs inside the tiny guest (tests/support/guests.py builds it): its /init and udhcpc's event script.

The init prints marker lines on the console (ttyS0) that tests and bench/vm_boot.py wait for, in this order:
`INIT_MARKER` (first line of user space; the KVM probe stops there), `LEASE_RE` or `NO_LEASE` (DHCP on eth0, when
the guest has a NIC), `FETCH_BEGIN`..`FETCH_END` (only with `cloudnet.fetch=<url>` on the kernel command line:
busybox wget's answer, e.g. the metadata service's), then `SHELL_MARKER` (a shell reads the console from then on).
Kernel command line switches: `cloudnet.probe` (power off right after the first line), `cloudnet.nodhcp`.
"""

from __future__ import annotations

INIT_MARKER = "cloudnet-tiny: init"
SHELL_MARKER = "cloudnet-tiny: shell"
NO_LEASE = "cloudnet-tiny: no lease"
FETCH_BEGIN = "cloudnet-tiny: fetch begin"
FETCH_END = "cloudnet-tiny: fetch end"
# The interface, address and prefix length udhcpc was acknowledged (the event script prints it once configured);
# it ends with the word after the prefix: the console delivers a line in pieces, and "/2" is a prefix of "/24".
LEASE_RE = r"cloudnet-tiny: lease (?P<dev>\S+) (?P<ip>[0-9.]+)/(?P<prefix>\d+) router"

# /dev/console is not in the archive (making device nodes would need root at build time): the kernel starts /init
# with no stdio, so it mounts devtmpfs first and takes the console from there.
INIT = f"""#!/bin/busybox sh
/bin/busybox mkdir -p /dev /proc /sys /tmp /run /etc
/bin/busybox mount -t devtmpfs dev /dev
exec 0</dev/console 1>/dev/console 2>&1
/bin/busybox --install -s /bin
export PATH=/bin HOME=/ PS1='# '
mount -t proc proc /proc
mount -t sysfs sys /sys
echo "{INIT_MARKER} $(uname -r)"
cmdline=$(cat /proc/cmdline)
case " $cmdline " in *" cloudnet.probe "*) poweroff -f ;; esac
for m in $(cat /etc/modules); do insmod "/lib/modules/$m.ko" || echo "cloudnet-tiny: insmod $m failed"; done
ip link set lo up
if ip link show eth0 >/dev/null 2>&1; then
    ip link set eth0 up
    case " $cmdline " in
    *" cloudnet.nodhcp "*) ;;
    *) udhcpc -i eth0 -s /etc/udhcpc.script -f -q -n -t 10 -T 1 -O mtu -O staticroutes || echo "{NO_LEASE}" ;;
    esac
fi
for arg in $cmdline; do
    case "$arg" in cloudnet.fetch=*)
        echo "{FETCH_BEGIN}"; wget -q -T 10 -O - "${{arg#cloudnet.fetch=}}"; rc=$?; echo; echo "{FETCH_END} $rc" ;;
    esac
done
# Kernel messages would interleave with commands' output on the console; warnings stay readable with dmesg.
dmesg -n 1
stty -echo
echo "{SHELL_MARKER}"
# PID 1 must not exit: a shell that does (`exit`) is started again. setsid -c: the console is its terminal.
while true; do setsid -c sh; done
"""

# busybox-static ships no default script for udhcpc. `mask` is the prefix length; static routes come in pairs
# (a gateway 0.0.0.0 is on-link), and a DHCP client that gets them ignores the router option (RFC 3442).
UDHCPC_SCRIPT = """#!/bin/sh
case "$1" in
deconfig)
    ip addr flush dev "$interface"
    ip link set "$interface" up
    ;;
bound|renew)
    ip addr flush dev "$interface"
    ip addr add "$ip/${mask:-24}" dev "$interface"
    [ -n "$mtu" ] && ip link set "$interface" mtu "$mtu"
    if [ -n "$staticroutes" ]; then
        set -- $staticroutes
        while [ $# -ge 2 ]; do
            if [ "$2" = 0.0.0.0 ]; then ip route replace "$1" dev "$interface"
            else ip route replace "$1" via "$2" dev "$interface"; fi
            shift 2
        done
    elif [ -n "$router" ]; then
        for r in $router; do ip route replace default via "$r" dev "$interface"; break; done
    fi
    : > /etc/resolv.conf
    for d in $dns; do echo "nameserver $d" >> /etc/resolv.conf; done
    [ -n "$hostname" ] && hostname "$hostname"
    echo "cloudnet-tiny: lease $interface $ip/${mask:-24} router ${router:-none} mtu ${mtu:-none}"
    ;;
leasefail|nak)
    echo "cloudnet-tiny: dhcp $1 on $interface"
    ;;
esac
exit 0
"""
