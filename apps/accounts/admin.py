# Users and groups are managed through Django's own admin (django.contrib.auth); the
# role groups are kept in sync by apps.accounts.services.role_groups_sync.
