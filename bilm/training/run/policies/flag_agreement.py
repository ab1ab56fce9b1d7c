"""Every policy's flags in the one vector the training step all-reduces, keyed by policy and flag name."""


class FlagAgreement:
    """Packs the policies' flags (`Policy.flags`, `Policy.requests`) into the step's request vector and
    unpacks the agreed vector into `{policy name: {flag: bool}}`.

    The order of the vector is fixed for the call (the policies' order,
    then each one's `flags`), the same on every worker; no one outside
    this class sees positions. A flag is agreed true when its mean over
    the replicas is positive: some worker raised it.
    """

    def __init__(self, policies):
        self.policies = list(policies)
        names = [policy.name for policy in self.policies]
        if len(set(names)) != len(names) or None in names:
            raise ValueError(f"Training policies need unique names; got {names}.")
        self.keys = [(policy.name, flag) for policy in self.policies for flag in policy.flags]

    def requests(self):
        """This worker's flags as 0/1 floats in the vector's order."""
        values = {}
        for policy in self.policies:
            raised = policy.requests()
            if set(raised) != set(policy.flags):
                raise ValueError(f"Policy {policy.name!r} declares the flags {sorted(policy.flags)} but requested "
                                 f"{sorted(raised)}.")
            values.update({(policy.name, flag): value for flag, value in raised.items()})
        return [float(bool(values[key])) for key in self.keys]

    def agreed(self, vector):
        """`{policy name: {flag: agreed}}` from the step's agreed vector (None: no flags were sent)."""
        agreed = {policy.name: {} for policy in self.policies}
        if vector is not None:
            for (name, flag), value in zip(self.keys, vector):
                agreed[name][flag] = float(value) > 0
        return agreed
