"""Make a fresh installation usable: the role groups, a login, and the example graphs."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db import transaction

from core.catalog import build_spec
from core.pool import PoolFields
from core.specio import load_yaml
from graphs import services
from graphs.models import Graph

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class Command(BaseCommand):
    help = "Create the role groups, a user per role (optional) and the example graphs."

    def add_arguments(self, parser):
        parser.add_argument("--admin-user", default="admin")
        parser.add_argument("--admin-password", default="")
        parser.add_argument("--demo-users", action="store_true", help="also create viewer and operator users")

    @transaction.atomic
    def handle(self, *args, admin_user, admin_password, demo_users, **opts):
        for name in ("viewer", "operator", "admin"):
            Group.objects.get_or_create(name=name)
        users = get_user_model()
        if admin_password and not users.objects.filter(username=admin_user).exists():
            users.objects.create_superuser(admin_user, f"{admin_user}@localhost", admin_password)
            self.stdout.write(f"created user {admin_user}")
        if demo_users and admin_password:
            for role in ("viewer", "operator"):
                if not users.objects.filter(username=role).exists():
                    user = users.objects.create_user(role, f"{role}@localhost", admin_password)
                    user.groups.add(Group.objects.get(name=role))
                    self.stdout.write(f"created user {role}")
        owner = users.objects.filter(username=admin_user).first()
        if not Graph.objects.filter(name="demo").exists():
            spec = build_spec(template="mocker-disagg", name="demo", model="demo-model", backend="mocker",
                              prefill=PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret=""),
                              decode=PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret=""))
            services.graph_create(spec=spec, user=owner, message="example: runs on this host",
                                  description="Disaggregated mocker graph: runs on the local runtime, no GPU.")
            self.stdout.write("created example graph demo")
        for path in sorted(EXAMPLES.glob("*.yaml")):
            obj = load_yaml(path.read_text(), max_bytes=1 << 20)
            if not Graph.objects.filter(name=obj["metadata"]["name"]).exists():
                graph, _rev, _rep = services.graph_import(obj=obj, user=owner, text=path.read_text(),
                                                          message=f"example: {path.name}")
                self.stdout.write(f"created example graph {graph.name}")
