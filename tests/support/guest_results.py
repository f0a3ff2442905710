"""What the Debian guest tells a test on its serial console once cloud-init is done (built into the image by
debian_guest.py): one line of JSON between two marker lines, printed by a unit ordered after cloud-final.service.

Files a test's user-data writes under /var/lib/cloudnet-test/ come back too, so a test proves user-data ran by
writing a value of its own there.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.qemu import VM

BEGIN = "cloudnet-guest-results-begin"
END = "cloudnet-guest-results-end"
WRITES = "/var/lib/cloudnet-test"  # where a test's user-data writes what it wants read back
THEN = "cloudnet.then="  # kernel command line: a second cloud-init run in the same VM with this datasource

UNIT = """\
[Unit]
Description=cloudnet tests: print cloud-init's results on the serial console
After=cloud-final.service
Wants=cloud-final.service

[Service]
Type=exec
ExecStart=/usr/local/sbin/cloudnet-results

[Install]
WantedBy=cloud-init.target
"""

# Wanted by cloud-init.target (which the cloud-init generator enables when cloud-init runs): multi-user.target
# would order itself after the unit, and cloud-final.service is ordered after multi-user.target (a cycle). Type exec:
# the boot finishes without waiting for the script, which waits for it, so systemd-analyze can say where it went.

# Debian's python3 in the guest (a cloud-init dependency). Writes to /dev/ttyS0 itself: the console must not be
# shared with other writers in the middle of the line.
SCRIPT = f"""\
#!/usr/bin/python3
import glob, json, os, subprocess


def run(*command):
    done = subprocess.run(command, capture_output=True, text=True)
    return {{"rc": done.returncode, "out": done.stdout, "err": done.stderr}}


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return None


def files(*patterns):
    return {{path: read(path) for pattern in patterns for path in sorted(glob.glob(pattern))}}


def collect():
    log = read("/var/log/cloud-init.log") or ""
    return {{
        "status": run("cloud-init", "status", "--long"),
        "cloud_id": run("cloud-id").get("out", "").strip(),
        "result": read("/run/cloud-init/result.json"),
        "status_json": read("/run/cloud-init/status.json"),
        "instance_id": read("/var/lib/cloud/data/instance-id"),
        "hostname": run("hostname").get("out", "").strip(),
        "fqdn": run("hostname", "--fqdn").get("out", "").strip(),
        "authorized_keys": files("/root/.ssh/authorized_keys", "/home/*/.ssh/authorized_keys"),
        "written": files("{WRITES}/*"),
        "warnings": [line for line in log.splitlines() if "WARNING" in line or "Traceback" in line][:50],
        "addresses": run("ip", "-j", "address"),
        "routes": run("ip", "-j", "route"),
        # Where the boot's time went (bench/debian_boot.py prints them).
        "boot_time": run("systemd-analyze").get("out", ""),
        "blame": run("systemd-analyze", "blame", "--no-pager").get("out", "").splitlines()[:15],
    }}


def report(results):
    with open("/dev/ttyS0", "w") as tty:
        tty.write("\\n{BEGIN}\\n" + json.dumps(results) + "\\n{END}\\n")


run("systemctl", "is-system-running", "--wait")
report(collect())
# `{THEN}DATASOURCE` on the kernel command line: cloud-init once more in this VM with that datasource alone, as
# for a new instance (its state cleaned, what the first run applied undone, its four stages run as its units run
# them), and a second report: two datasources' checks for one boot of ~2 min of emulated CPU.
then = [w.split("=", 1)[1] for w in (read("/proc/cmdline") or "").split() if w.startswith("{THEN}")]
if then:
    run("cloud-init", "clean", "--logs")
    for path in glob.glob("{WRITES}/*") + glob.glob("/home/*/.ssh/authorized_keys") + ["/root/.ssh/authorized_keys"]:
        if os.path.exists(path):
            os.remove(path)
    run("hostnamectl", "set-hostname", "debian12")
    listed = "datasource_list: [%s, None]\\n" % then[0]
    # (ds-identify's /run/cloud-init/cloud.cfg is read after /etc/cloud/cloud.cfg.d: both say it)
    for path in ("/etc/cloud/cloud.cfg.d/99-cloudnet-then.cfg", "/run/cloud-init/cloud.cfg"):
        with open(path, "w") as f:
            f.write(listed)
    for stage in (["init", "--local"], ["init"], ["modules", "--mode", "config"], ["modules", "--mode", "final"]):
        run("cloud-init", *stage)
    report(collect())
"""


RESULTS = re.compile(rf"^{BEGIN}\n(.*)\n{END}\n", re.M)
CLOUD_INIT_TIMEOUT = 900.0  # TCG on a loaded 2-core machine: ~2 min alone, several times that beside other boots


def cloud_init_results(vm: VM, timeout: float = CLOUD_INIT_TIMEOUT) -> dict[str, Any]:
    """What the guest printed once cloud-init was done."""
    return dict(json.loads(vm.expect(RESULTS, timeout)[1]))
