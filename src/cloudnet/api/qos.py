"""/v2.0/qos/...: QoS policies, their rules of each type, and the rule types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron, resources
from cloudnet.api.deps import call, context, state
from cloudnet.services import tags
from cloudnet.services.qos import policies, rules
from cloudnet.store import tables_qos

POLICIES = "/v2.0/qos/policies"
# Neutron's tag extension names the policies `policies`: their tags are /v2.0/policies/{id}/tags (api/tags.py).
tags.register("policies", tags.Taggable("policy", tables_qos.qos_policies, policies.get_visible))


def _on_store(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda st, *args: fn(st.store, *args)


_FNS = (policies.list_policies, policies.get_policy, policies.create_policies, policies.update_policy,
         policies.delete_policy)  # fmt: skip
# The policies: routes of the core resources' shape (api/resources.py), documented as theirs (api/openapi.py).
RESOURCE = resources.Resource("qos/policies", "policy", "policies", *map(_on_store, _FNS))


def _rule_routes(router: APIRouter, kind: rules.Kind) -> None:
    base = f"{POLICIES}/{{policy_id}}/{kind.collection}"

    async def list_(request: Request, policy_id: str) -> Response:
        q = neutron.list_query(request)
        page = await call(rules.list_rules, state(request).store, context(request), kind.collection, policy_id, q)
        return neutron.list_response(request, kind.collection, page, q)

    async def create(request: Request, policy_id: str) -> Response:
        body = neutron.unwrap_one(await neutron.body_of(request), kind.member)
        item = await call(rules.create_rule, state(request).store, context(request), kind.collection, policy_id, body)
        return neutron.JSON({kind.member: item}, status_code=201)

    async def show(request: Request, policy_id: str, rule_id: str) -> Response:
        item = await call(rules.get_rule, state(request).store, context(request), kind.collection, policy_id, rule_id)
        return neutron.JSON({kind.member: neutron.trim(item, neutron.fields_of(request))})

    async def update(request: Request, policy_id: str, rule_id: str) -> Response:
        body = neutron.unwrap_one(await neutron.body_of(request), kind.member)
        item = await call(rules.update_rule, state(request).store, context(request), kind.collection, policy_id,
                          rule_id, body)  # fmt: skip
        return neutron.JSON({kind.member: item})

    async def delete(request: Request, policy_id: str, rule_id: str) -> Response:
        await call(rules.delete_rule, state(request).store, context(request), kind.collection, policy_id, rule_id)
        return Response(status_code=204)

    router.add_api_route(base, list_, methods=["GET"], name=f"list_{kind.collection}")
    router.add_api_route(base, create, methods=["POST"], name=f"create_{kind.member}")
    router.add_api_route(base + "/{rule_id}", show, methods=["GET"], name=f"show_{kind.member}")
    router.add_api_route(base + "/{rule_id}", update, methods=["PUT"], name=f"update_{kind.member}")
    router.add_api_route(base + "/{rule_id}", delete, methods=["DELETE"], name=f"delete_{kind.member}")


def build() -> APIRouter:
    router = APIRouter()
    resources.add_routes(router, RESOURCE)
    for kind in rules.KINDS.values():
        _rule_routes(router, kind)

    async def rule_types(request: Request) -> Response:
        return neutron.JSON({"rule_types": rules.list_rule_types(context(request))})

    async def rule_type(request: Request, name: str) -> Response:
        return neutron.JSON({"rule_type": rules.get_rule_type(context(request), name)})

    router.add_api_route("/v2.0/qos/rule-types", rule_types, methods=["GET"], name="list_rule_types")
    router.add_api_route("/v2.0/qos/rule-types/{name}", rule_type, methods=["GET"], name="show_rule_type")
    return router
