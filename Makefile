# cloudnet: `make run` (server + this host's agent) and `make test` install what they need (Debian packages, a virtualenv from
# requirements.lock) and then start cloudnet / run the whole test suite.

PYTHON      ?= /usr/bin/python3
VENV        := .venv
BIN         := $(VENV)/bin
STATE_DIR   ?= /var/lib/cloudnet
HOOKS_DIR   ?= /usr/share/containers/oci/hooks.d
NETAVARK_DIR ?= /usr/local/libexec/netavark
# python3-nftables (libnftables bindings) is not on PyPI: the venv sees Debian's packages for it.
# cloud-init: the tests drive its real metadata readers (never its command) with Debian's python3.
# dnsmasq-base: the DHCP server of the Linux dataplane (dnsmasq without its system service); isc-dhcp-client: the
# DHCPv6 client of its tests (Debian's busybox has no udhcpc6).
# python3-openvswitch: the OVSDB JSON parser in C that cloudnet's OVN speed depends on (only recommended on 13).
# libarchive-tools: bsdtar, the tests' reader of config drive images (a reader other than the writer, pycdlib).
# qemu-system-x86: the VMM of the tests that boot real guests (KVM where it really runs one, else plain emulation);
# their tiny guest is Debian's kernel (fetched with `apt-get download`, never installed) and a busybox-static
# initramfs (busybox's own cpio), its modules resolved with kmod's depmod (Debian 13's come .ko.xz: Python unpacks).
# python3-serial: pyserial, which cloud-init's SmartOS datasource needs (Debian 13's cloud-init no longer pulls it in).
# mmdebstrap, e2fsprogs (mke2fs -d): the tests' Debian 12 cloud-init guest, built from Debian's archive
# (tests/support/debian_guest.py).
# chromium, chromium-driver: the web UI's tests and bench drive Debian's browser headless (Selenium; no browser download).
# These names hold on every release the installer knows; scripts/install-debian-packages.sh adds each one's own.
DEB_PACKAGES := python3 python3-venv python3-dev ca-certificates gcc make \
                postgresql iproute2 nftables python3-nftables iputils-ping procps cloud-init \
                curl wrk ovn-central ovn-host openvswitch-switch python3-openvswitch \
                podman runc containernetworking-plugins busybox-static docker.io containerd \
                libarchive-tools dnsmasq-base isc-dhcp-client qemu-system-x86 kmod python3-serial \
                mmdebstrap e2fsprogs chromium chromium-driver
STAMP       := $(VENV)/.installed

.PHONY: deps run test lint format lock bench clean

deps: $(STAMP)

$(STAMP): Makefile requirements.lock pyproject.toml scripts/install-debian-packages.sh scripts/openstacksdk-tests.lock
	./scripts/install-debian-packages.sh $(DEB_PACKAGES)
	grep -qs 'include-system-site-packages = true' $(VENV)/pyvenv.cfg || $(PYTHON) -m venv --clear --system-site-packages $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --require-hashes -r requirements.lock
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	./scripts/fetch-openstacksdk-tests.sh $(BIN)/python $(VENV)/sdk-tests
	touch $@

run: deps
	@./scripts/platform.sh
	@# Put the commands on PATH for the walk-through, unless other ones of these names are already there.
	@for cmd in cloudnet cloudnet-mdata; do \
		if [ -w /usr/local/bin ] && { [ ! -e /usr/local/bin/$$cmd ] || [ -L /usr/local/bin/$$cmd ]; }; then \
			ln -sfn $(CURDIR)/$(BIN)/$$cmd /usr/local/bin/$$cmd; fi; done
	@# cloudnet-cni where CNI runtimes look for plugins (podman, containerd: /opt/cni/bin), unless another one is there.
	@mkdir -p /opt/cni/bin 2>/dev/null; if [ -w /opt/cni/bin ] && { [ ! -e /opt/cni/bin/cloudnet-cni ] || \
		[ -L /opt/cni/bin/cloudnet-cni ]; }; then ln -sfn $(CURDIR)/$(BIN)/cloudnet-cni /opt/cni/bin/cloudnet-cni; fi
	@# cloudnet-netavark where podman 5 looks for netavark plugins first (containers.conf's netavark_plugin_dirs).
	@mkdir -p $(NETAVARK_DIR) 2>/dev/null; if [ -w $(NETAVARK_DIR) ] && { [ ! -e $(NETAVARK_DIR)/cloudnet-netavark ] || \
		[ -L $(NETAVARK_DIR)/cloudnet-netavark ]; }; then \
		ln -sfn $(CURDIR)/$(BIN)/cloudnet-netavark $(NETAVARK_DIR)/cloudnet-netavark; fi
	@# cloudnet-oci-hook where podman (and CRI-O) read OCI hooks: run only for containers annotated io.cloudnet.mdata
	@# (its hooks.d file runs /usr/bin/env, so the file never breaks other containers), unless another file is there.
	@mkdir -p $(HOOKS_DIR) 2>/dev/null; if [ -w $(HOOKS_DIR) ] && { [ ! -e $(HOOKS_DIR)/cloudnet-mdata.json ] || \
		grep -qs cloudnet-oci-hook $(HOOKS_DIR)/cloudnet-mdata.json; }; then \
		$(BIN)/cloudnet-oci-hook --print-config --state-dir $(STATE_DIR) > $(HOOKS_DIR)/.cloudnet-mdata.tmp && \
		mv -f $(HOOKS_DIR)/.cloudnet-mdata.tmp $(HOOKS_DIR)/cloudnet-mdata.json; fi
	@# UP_ARGS=--docker-driver also serves dockerd as network + IPAM driver (/run/docker/plugins/cloudnet.sock).
	@$(BIN)/cloudnet up --state-dir $(STATE_DIR) $(UP_ARGS)

# Lint first: ruff's checks and its formatting are part of the suite. The tests run two workers per core, up to 4
# (much of a test's time is waiting on daemons, guests and the kernel: with one per core the cores sat a third idle),
# each module on one worker, so that its fixtures are shared as written; the slowest modules first:
# tests/conftest.py. TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= $(shell n=$$(( $$(nproc) * 2 )); [ $$n -gt 4 ] && n=4; echo $$n)
test: lint
	@./scripts/platform.sh
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS); rc=$$?; \
		[ $$rc -eq 5 ] && echo "no tests collected" && rc=0; exit $$rc

lint: deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: deps
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Regenerate the lock file after changing dependencies in pyproject.toml (needs `uv`).
lock:
	uv pip compile pyproject.toml --extra dev --generate-hashes --python-version 3.11 -o requirements.lock

bench: deps
	$(BIN)/python bench/api_ports.py
	$(BIN)/python bench/api_metrics.py
	$(BIN)/python bench/attach.py
	$(BIN)/python bench/vm_taps.py
	$(BIN)/python bench/metadata.py
	$(BIN)/python bench/forwards.py
	$(BIN)/python bench/mdata.py
	$(BIN)/python bench/security_groups.py
	$(BIN)/python bench/http_servers.py
	$(BIN)/python bench/cni.py
	$(BIN)/python bench/ovn_forwards.py
	$(BIN)/python bench/ovn_ports.py
	$(BIN)/python bench/ovn_scale.py
	$(BIN)/python bench/vm_boot.py
	$(BIN)/python bench/ui_render.py
	$(BIN)/python bench/debian_boot.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
