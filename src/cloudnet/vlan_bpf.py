"""802.1Q tagging in tc: two tiny eBPF classifiers, assembled here, loaded with bpf(2) and attached with pyroute2.

Why not VLAN devices or the bridge's VLAN filtering: a kernel may have neither (CONFIG_VLAN_8021Q and
CONFIG_BRIDGE_VLAN_FILTERING are options; the kernel these tests run on has neither), while cls_bpf's direct action
with its VLAN helpers is in every kernel that runs containers. Shared: the agent tags for a trunk's subports on the
host (dataplane/linux/trunk_vlans.py), cloudnet-cni for a pod's in a VM (cni/nested.py). The programs are a dozen
instructions each, built from parsed integers only (VLAN ids, ifindexes): nothing to compile, nothing to ship.

  untag(subports)   on the ingress of a trunk parent's host device: a frame tagged with a subport's VLAN (802.1Q)
                    loses its tag and is redirected to that subport's device; an untagged frame goes on to the
                    parent's bridge; any other tagged frame (another VLAN, 802.1ad) is dropped here.
  tag(vid, parent)  on the ingress of a subport's inner end: what the subport's bridge sends the subport gets the
                    subport's tag and is redirected out of the parent's device; an already tagged frame is dropped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import struct

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

SYS_BPF = 321  # x86_64
BPF_PROG_LOAD = 5
BPF_PROG_TYPE_SCHED_CLS = 3
# struct __sk_buff offsets (include/uapi/linux/bpf.h)
VLAN_PRESENT, VLAN_TCI, VLAN_PROTO = 20, 24, 28
PUSH, POP, REDIRECT = 18, 19, 23  # helper ids: bpf_skb_vlan_push, bpf_skb_vlan_pop, bpf_redirect
TC_ACT_OK, TC_ACT_SHOT = 0, 2
ETH_P_8021Q_BE = 0x0081  # htons(0x8100), as the skb keeps it and a u32 load on little endian reads it
INGRESS = 0xFFFF0000  # the ingress qdisc's handle (ffff:), parent of its filters
PRIO = 0xC10  # our filter's priority: other filters on the device (QoS policing) keep theirs
EEXIST, ENOENT = 17, 2
MAX_SUBPORTS = 4094  # (one jump per subport: the verifier's 4096-instruction classic limit stays far)

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def _mov_reg(dst: int, src: int) -> bytes:
    return _insn(0xBF, dst, src)


def _mov_imm(dst: int, imm: int) -> bytes:
    return _insn(0xB7, dst, imm=imm)


def _load_u32(dst: int, src: int, off: int) -> bytes:
    return _insn(0x61, dst, src, off)


def _call(helper: int) -> bytes:
    return _insn(0x85, imm=helper)


def _exit() -> bytes:
    return _insn(0x95)


def _jeq(dst: int, imm: int, off: int) -> bytes:
    return _insn(0x15, dst, off=off, imm=imm)


def _jne(dst: int, imm: int, off: int) -> bytes:
    return _insn(0x55, dst, off=off, imm=imm)


def _verdict(value: int) -> list[bytes]:
    return [_mov_imm(0, value), _exit()]


def _redirect(ifindex: int) -> list[bytes]:
    return [_mov_imm(1, ifindex), _mov_imm(2, 0), _call(REDIRECT), _exit()]


def untag_program(subports: list[tuple[int, int]]) -> bytes:
    """(vid, ifindex) pairs: untag and redirect each VLAN; pass untagged frames; drop every other tagged one."""
    if len(subports) > MAX_SUBPORTS:
        raise ValueError(f"at most {MAX_SUBPORTS} subports on one trunk")
    head = [_mov_reg(6, 1), _load_u32(2, 6, VLAN_PRESENT), None, _load_u32(3, 6, VLAN_PROTO), None,
            _load_u32(2, 6, VLAN_TCI), _insn(0x57, 2, imm=0xFFF)]  # fmt: skip
    per = 2 + len(_redirect(0))  # a subport's branch: pop, then redirect
    n = len(subports)
    # layout: head, a compare per subport, drop (2), a branch per subport, pass (2); a jump's offset counts from
    # the instruction after it
    drop_at = len(head) + n
    pass_at = drop_at + 2 + n * per
    out = list(head)
    out[2] = _jeq(2, 0, pass_at - 3)  # untagged: pass
    out[4] = _jne(3, ETH_P_8021Q_BE, drop_at - 5)  # not 802.1Q: drop
    for i, (vid, _ifindex) in enumerate(subports):
        here = len(head) + i
        out.append(_jeq(2, vid, drop_at + 2 + i * per - here - 1))
    out += _verdict(TC_ACT_SHOT)
    for _vid, ifindex in subports:
        out += [_mov_reg(1, 6), _call(POP), *_redirect(ifindex)]
    out += _verdict(TC_ACT_OK)
    return b"".join(out)


def tag_program(vid: int, parent_ifindex: int) -> bytes:
    """Tag with `vid` (802.1Q) and redirect out of the parent's device; drop a frame that is tagged already."""
    return b"".join([_mov_reg(6, 1), _load_u32(2, 6, VLAN_PRESENT), _jeq(2, 0, 2), *_verdict(TC_ACT_SHOT),
                     _mov_reg(1, 6), _mov_imm(2, ETH_P_8021Q_BE), _mov_imm(3, vid), _call(PUSH),
                     *_redirect(parent_ifindex)])  # fmt: skip


def load(program: bytes, name: str) -> int:
    """The program loaded as a tc classifier: its fd (the caller closes it once attached)."""
    insns = ctypes.create_string_buffer(program)
    license = ctypes.create_string_buffer(b"GPL")  # (the licence the kernel asks of a program calling its helpers)
    log = ctypes.create_string_buffer(4096)
    attr = ctypes.create_string_buffer(struct.pack(
        "<IIQQIIQII16s", BPF_PROG_TYPE_SCHED_CLS, len(program) // 8, ctypes.addressof(insns),
        ctypes.addressof(license), 1, len(log), ctypes.addressof(log), 0, 0, name.encode()[:15]), 128)  # fmt: skip
    fd = _libc.syscall(SYS_BPF, BPF_PROG_LOAD, attr, 128)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf program {name} refused: {os.strerror(err)}: {log.value.decode(errors='replace')}")
    return int(fd)


def attach(ipr: IPRoute, ifindex: int, program: bytes, name: str) -> None:
    """`program` as the direct-action classifier on the device's ingress (the ingress qdisc made when missing),
    replacing the one there: idempotent, and a changed program takes the old one's place atomically."""
    try:
        ipr.tc("add", "ingress", ifindex, INGRESS)
    except NetlinkError as exc:
        if exc.code != EEXIST:
            raise
    fd = load(program, name)
    try:
        ipr.tc("replace-filter", "bpf", ifindex, handle=1, parent=INGRESS, prio=PRIO, fd=fd, name=name,
               classid=1, direct_action=True)  # fmt: skip
    finally:
        os.close(fd)


def ensure(ipr: IPRoute, ifindex: int, program: bytes, kind: str) -> None:
    """`program` on the device unless it is there already: its name says what it does (`kind`) and hashes its
    instructions, so one found under that name is the one wanted."""
    name = f"cn_{kind}_{hashlib.sha1(program).hexdigest()[:8]}"
    try:
        if attached(ipr, ifindex) == name:
            return
    except NetlinkError:
        pass  # (read again by attaching)
    attach(ipr, ifindex, program, name)


def detach(ipr: IPRoute, ifindex: int) -> None:
    """Our classifier off the device's ingress (what else is there stays)."""
    try:
        ipr.tc("del-filter", "bpf", ifindex, handle=1, parent=INGRESS, prio=PRIO)
    except NetlinkError as exc:
        if exc.code not in (ENOENT, 22):  # (no such filter, or no ingress qdisc at all)
            raise


def attached(ipr: IPRoute, ifindex: int) -> str | None:
    """The name of our classifier on the device's ingress, if there is one."""
    try:
        filters = ipr.get_filters(ifindex, parent=INGRESS)
    except NetlinkError:
        return None
    for f in filters:
        if (f["info"] >> 16) == PRIO:
            options = f.get_attr("TCA_OPTIONS")
            name = options.get_attr("TCA_BPF_NAME") if options is not None else None
            if name:
                return str(name)
    return None
