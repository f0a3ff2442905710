"""CRUD routes for the Neutron core resources, generated from one table of service functions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import AppState, call, context, quick, state
from cloudnet.api.events import long_poll
from cloudnet.northbound import gateway_ha
from cloudnet.services import events, instances
from cloudnet.services.forwards import floating_ips
from cloudnet.services.networks import address_scopes, networks, routers, subnetpools, subnets
from cloudnet.services.ports import ports, trunks
from cloudnet.services.rbac import policies as rbac_policies
from cloudnet.services.security import security_group_rules, security_groups

MAX_MEMBER_WAIT = 30.0  # seconds a GET ?wait=S may hold its connection (any project's member may ask)
MAX_MEMBER_WAITERS = 256  # such waits at once in one server process; beyond, the answer comes at once


@dataclass(frozen=True)
class Resource:
    collection: str  # URL segment, e.g. "security-groups"
    member: str  # body key of one, e.g. "security_group"
    plural: str  # body key of many, e.g. "security_groups"
    list: Callable[..., Any]
    get: Callable[..., Any]
    create: Callable[..., Any]
    update: Callable[..., Any] | None
    delete: Callable[..., Any]
    # A single create is one short transaction that waits for no other lock: run it with `quick`.
    quick_create: bool = False
    # One that may be waited for: GET .../{id}?wait=S answers once this holds for it (or after S seconds).
    settled: Callable[[dict[str, Any]], bool] | None = None


def _on_store(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Adapt a service function taking the store to one taking the app state."""
    return lambda st, *args: fn(st.store, *args)


def _overlay_overhead(st: AppState) -> int:
    return networks.GENEVE_OVERHEAD if st.config.dataplane == "ovn" else 0


def _create_networks(st: AppState, ctx: Any, bodies: Any) -> Any:
    return networks.create_networks(st.store, ctx, bodies, st.config.default_mtu, _overlay_overhead(st))


def _update_network(st: AppState, ctx: Any, network_id: str, body: Any) -> Any:
    return networks.update_network(st.store, ctx, network_id, body, st.config.default_mtu, _overlay_overhead(st))


def _resource(collection: str, member: str, plural: str, module: Any, list_: str, get: str, create: str,
              update: str | None, delete: str) -> Resource:  # fmt: skip
    fn = lambda name: _on_store(getattr(module, name))  # noqa: E731
    return Resource(collection, member, plural, fn(list_), fn(get), fn(create), fn(update) if update else None,
                    fn(delete))  # fmt: skip


RESOURCES = [
    Resource("networks", "network", "networks", _on_store(networks.list_networks), _on_store(networks.get_network),
             _create_networks, _update_network, _on_store(networks.delete_network)),
    _resource("subnets", "subnet", "subnets", subnets, "list_subnets", "get_subnet", "create_subnets",
              "update_subnet", "delete_subnet"),
    replace(_resource("ports", "port", "ports", ports, "list_ports", "get_port", "create_ports", "update_port",
                      "delete_port"), quick_create=True),
    _resource("routers", "router", "routers", routers, "list_routers", "get_router", "create_routers",
              "update_router", "delete_router"),
    _resource("floatingips", "floatingip", "floatingips", floating_ips, "list_floating_ips", "get_floating_ip",
              "create_floating_ips", "update_floating_ip", "delete_floating_ip"),
    _resource("security-groups", "security_group", "security_groups", security_groups, "list_groups",
              "get_group", "create_groups", "update_group", "delete_group"),
    replace(_resource("instances", "instance", "instances", instances, "list_instances", "get_instance",
                      "create_instances", "update_instance", "delete_instance"), settled=instances.settled),
    _resource("trunks", "trunk", "trunks", trunks, "list_trunks", "get_trunk", "create_trunks", "update_trunk",
              "delete_trunk"),
    _resource("security-group-rules", "security_group_rule", "security_group_rules", security_group_rules,
              "list_rules", "get_rule", "create_rules", None, "delete_rule"),
    _resource("subnetpools", "subnetpool", "subnetpools", subnetpools, "list_pools", "get_pool", "create_pools",
              "update_pool", "delete_pool"),
    _resource("address-scopes", "address_scope", "address_scopes", address_scopes, "list_scopes", "get_scope",
              "create_scopes", "update_scope", "delete_scope"),
    _resource("rbac-policies", "rbac_policy", "rbac_policies", rbac_policies, "list_policies", "get_policy",
              "create_policies", "update_policy", "delete_policy"),
]  # fmt: skip


def add_routes(router: APIRouter, res: Resource) -> None:
    base = f"/v2.0/{res.collection}"

    async def list_(request: Request) -> Response:
        q = neutron.list_query(request)
        page = await call(res.list, state(request), context(request), q)
        return neutron.list_response(request, res.plural, page, q)

    async def show(request: Request, item_id: str) -> Response:
        neutron.check_id(res.member, item_id)
        st, ctx, wait = state(request), context(request), request.query_params.get("wait")
        if res.settled is not None and wait is not None:  # (visibility first: the first read fails at once)
            seconds = events.seconds("wait", wait, min(st.config.max_event_wait, MAX_MEMBER_WAIT))
            reports = request.app.state.reports  # woken by agents' reports only, not by every commit
            if reports.waiters >= MAX_MEMBER_WAITERS:
                seconds = 0.0  # answered as it is (the caller asks again): bounded reads however many wait
            item = await long_poll(request, seconds, lambda: call(res.get, st, ctx, item_id), res.settled, reports)
        else:
            item = await call(res.get, st, ctx, item_id)
        return neutron.JSON({res.member: neutron.trim(item, neutron.fields_of(request))})

    async def create(request: Request) -> Response:
        bodies, bulk = neutron.unwrap(await neutron.body_of(request), res.member, res.plural)
        st, ctx = state(request), context(request)
        if res.quick_create and not bulk:
            items = await quick(st.store, res.create, st, ctx, bodies)
        else:
            items = await call(res.create, st, ctx, bodies)
        return neutron.JSON({res.plural: items} if bulk else {res.member: items[0]}, status_code=201)

    async def delete(request: Request, item_id: str) -> Response:
        neutron.check_id(res.member, item_id)
        await call(res.delete, state(request), context(request), item_id)
        return Response(status_code=204)

    router.add_api_route(base, list_, methods=["GET"], name=f"list_{res.plural}")
    router.add_api_route(base, create, methods=["POST"], name=f"create_{res.member}")
    router.add_api_route(base + "/{item_id}", show, methods=["GET"], name=f"show_{res.member}")
    router.add_api_route(base + "/{item_id}", delete, methods=["DELETE"], name=f"delete_{res.member}")
    if res.update is not None:
        update_fn = res.update

        async def update(request: Request, item_id: str) -> Response:
            neutron.check_id(res.member, item_id)
            body = neutron.unwrap_one(await neutron.body_of(request), res.member)
            item = await call(update_fn, state(request), context(request), item_id, body)
            return neutron.JSON({res.member: item})

        router.add_api_route(base + "/{item_id}", update, methods=["PUT"], name=f"update_{res.member}")


def build() -> APIRouter:
    router = APIRouter()
    for res in RESOURCES:
        add_routes(router, res)

    async def add_interface(request: Request, router_id: str) -> Response:
        neutron.check_id("router", router_id)
        body = await neutron.body_of(request)
        info = await call(routers.add_interface, state(request).store, context(request), router_id, body)
        return neutron.JSON(info)

    async def remove_interface(request: Request, router_id: str) -> Response:
        neutron.check_id("router", router_id)
        body = await neutron.body_of(request)
        info = await call(routers.remove_interface, state(request).store, context(request), router_id, body)
        return neutron.JSON(info)

    def extraroutes(add: bool) -> Callable[..., Any]:
        async def change(request: Request, router_id: str) -> Response:
            neutron.check_id("router", router_id)
            body = await neutron.body_of(request)
            return neutron.JSON(await call(routers.change_routes, state(request).store, context(request), router_id,
                                           body, add))  # fmt: skip

        return change

    async def gateway_chassis(request: Request, router_id: str) -> Response:
        """The router's gateway chassis on OVN and whether its gateway can fail over (northbound/gateway_ha.py)."""
        neutron.check_id("router", router_id)
        st = state(request)
        item = await call(gateway_ha.show, st.store, context(request), router_id, list(st.config.ovn_gateway_chassis),
                          st.config.dataplane)  # fmt: skip
        return neutron.JSON({"gateway_chassis": item})

    router.add_api_route("/v2.0/routers/{router_id}/add_router_interface", add_interface, methods=["PUT"])
    router.add_api_route("/v2.0/routers/{router_id}/remove_router_interface", remove_interface, methods=["PUT"])
    router.add_api_route("/v2.0/routers/{router_id}/add_extraroutes", extraroutes(True), methods=["PUT"])
    router.add_api_route("/v2.0/routers/{router_id}/remove_extraroutes", extraroutes(False), methods=["PUT"])
    router.add_api_route("/v2.0/routers/{router_id}/gateway_chassis", gateway_chassis, methods=["GET"])
    return router
