"""Kernel helpers every driver that programs this host's kernel shares (the Linux driver, the SR-IOV port binder,
an OVN driver's local side): network namespaces (netns), checked opening of an instance's namespace (ns_guard),
routes (routes), and a port's configuration inside its instance (addressing). No driver imports another: what two of
them need lives here."""
