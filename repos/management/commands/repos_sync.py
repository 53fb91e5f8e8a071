"""manage.py repos_sync [NAME ...]: sync repositories now (all without names), then export what
waits, as the periodic task does; prints what each sync did."""

from django.core.management.base import BaseCommand, CommandError

from repos.export import repository_export
from repos.models import Repository
from repos.sync import repository_sync


class Command(BaseCommand):
    help = "Sync Git repositories into graphs now (all of them unless named)."

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="*")

    def handle(self, *args, names, **options):
        repos = list(Repository.objects.filter(name__in=names) if names else Repository.objects.all())
        missing = sorted(set(names) - {r.name for r in repos})
        if missing:
            raise CommandError(f"no repository named {', '.join(missing)}")
        failed = False
        for repo in repos:
            result = repository_sync(repository=repo, via="cli")
            counts = result.as_dict()["counts"]
            if result.error:
                failed = True
                self.stderr.write(f"{repo.name}: sync failed: {result.error}")
                continue
            self.stdout.write(f"{repo.name}: at {(result.commit or 'an empty branch')[:12]}, {counts['imported']} "
                              f"imported, {counts['removed']} removed from Git, {counts['refused']} refused")
            for refused in result.refused:
                for f in refused["findings"]:
                    self.stdout.write(f"  {refused['path']}: {f['path'] or '(manifest)'}: {f['message']}")
            repository_export(repository=repo)
        if failed:
            raise CommandError("some repositories could not be synced")
