"""Admin pages: register and edit clusters, see their health, write the Hugging Face token
Secret. They read the database only; a check of a cluster runs as a task."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from accounts.roles import Role, role_required
from core.errors import RuntimeFailure

from . import services
from .forms import ClusterForm, HFTokenForm
from .models import Cluster


@role_required(Role.ADMIN)
@require_safe
def cluster_list(request):
    return render(request, "clusters/list.html", {"clusters": Cluster.objects.all()})


@role_required(Role.ADMIN)
@require_http_methods(["GET", "POST"])
def cluster_edit(request, name: str | None = None):
    cluster = get_object_or_404(Cluster, name=name) if name else None
    initial = {}
    if cluster is not None:
        initial = {f: getattr(cluster, f) for f in services.EDITABLE}
        initial["namespaces"] = ", ".join(cluster.namespaces or [])
    form = ClusterForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            if cluster is None:
                cluster = services.cluster_create(**form.cleaned_data, user=request.user)
                messages.success(request, f"Cluster {cluster.name} registered; checking it now.")
            else:
                cluster = services.cluster_update(cluster=cluster, user=request.user, **form.cleaned_data)
                messages.success(request, f"Cluster {cluster.name} saved; checking it again.")
            return redirect("clusters:list")
        except services.ClusterError as exc:
            form.add_error(None, str(exc))
    return render(request, "clusters/form.html", {"form": form, "cluster": cluster},
                  status=400 if request.method == "POST" else 200)


@role_required(Role.ADMIN)
@require_POST
def cluster_delete(request, name: str):
    cluster = get_object_or_404(Cluster, name=name)
    try:
        services.cluster_delete(cluster=cluster, user=request.user)
        messages.success(request, f"Cluster {name} removed.")
    except services.ClusterError as exc:
        messages.error(request, str(exc))
    return redirect("clusters:list")


@role_required(Role.ADMIN)
@require_POST
def cluster_check(request, name: str):
    cluster = get_object_or_404(Cluster, name=name)
    services.cluster_check_later(cluster)
    messages.success(request, f"Checking {name}; this page shows the result when it is in.")
    return redirect("clusters:list")


@role_required(Role.ADMIN)
@require_http_methods(["GET", "POST"])
@sensitive_post_parameters("value")  # error reports and logs show the token as ********
@sensitive_variables("form", "d")
def hf_token(request, name: str):
    """Create or replace the Hugging Face token Secret. Write-only: never shown back."""
    cluster = get_object_or_404(Cluster, name=name)
    form = HFTokenForm(request.POST or None, namespaces=cluster.namespaces or [])
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            d = form.cleaned_data
            try:
                created = services.hf_token_secret_put(cluster=cluster, namespace=d["namespace"], value=d["value"],
                                                       secret_name=d["secret_name"], key=d["key"], user=request.user)
                messages.success(request, f"Secret {d['namespace']}/{d['secret_name']} "
                                          f"{'created' if created else 'updated'} (key {d['key']}).")
                return redirect("clusters:list")
            except (services.ClusterError, RuntimeFailure) as exc:
                form.add_error(None, str(exc))
                status = 502 if isinstance(exc, RuntimeFailure) else 400
    return render(request, "clusters/hf_token.html", {"form": form, "cluster": cluster}, status=status)
