"""Errors raised by services and translated by the HTTP layer into Neutron's error body.

Each error carries the HTTP status and the Neutron exception class name (`type`), so that
clients such as openstacksdk map them exactly as they would a real Neutron's.
"""

from __future__ import annotations


class CloudnetError(Exception):
    status = 500
    type = "NeutronException"

    def __init__(self, message: str, *, type: str | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        if type is not None:
            self.type = type
        self.detail = detail


class BadRequest(CloudnetError):
    status = 400
    type = "HTTPBadRequest"


class InvalidInput(BadRequest):
    type = "InvalidInput"

    def __init__(self, reason: str) -> None:
        # Neutron's wording ends with a period (InvalidInput: "Invalid input for operation: %(error_message)s.").
        super().__init__(f"Invalid input for operation: {reason}" + ("" if reason.endswith(".") else "."))


class NotAuthenticated(CloudnetError):
    status = 401
    type = "HTTPUnauthorized"


class Forbidden(CloudnetError):
    status = 403
    type = "PolicyNotAuthorized"


def disallowed(action: str) -> Forbidden:
    """Neutron's PolicyNotAuthorized, worded as Neutron words it: the policy rule the caller fails, e.g.
    `create_network:shared` or `update_network`."""
    return Forbidden(f"(rule:{action}) is disallowed by policy")


class NotFound(CloudnetError):
    status = 404
    type = "HTTPNotFound"


class Conflict(CloudnetError):
    status = 409
    type = "Conflict"


class PreconditionFailed(CloudnetError):
    status = 412
    type = "PreconditionFailed"


class ServiceUnavailable(CloudnetError):
    status = 503
    type = "ServiceUnavailable"

    def __init__(self, message: str, *, retry_after: int = 1, type: str | None = None) -> None:
        super().__init__(message, type=type)
        self.retry_after = retry_after


# Neutron's NotFound wordings that differ from "<Label> <id> could not be found." (neutron-lib's l3 RouterNotFound
# has no period; neutron's securitygroup extension says "does not exist").
_NOT_FOUND = {
    "router": "Router {} could not be found",
    "security_group": "Security group {} does not exist",
    "security_group_rule": "Security group rule {} does not exist",
}


def not_found(kind: str, ident: object) -> NotFound:
    """`NetworkNotFound`: "Network <id> could not be found." as Neutron words it."""
    label = {"network": "Network", "subnet": "Subnet", "port": "Port"}.get(kind, kind.replace("_", " ").capitalize())
    type_name = "".join(part.capitalize() for part in kind.split("_")) + "NotFound"
    message = _NOT_FOUND.get(kind, label + " {} could not be found.").format(ident)
    return NotFound(message, type=type_name)
