"""django.contrib.admin with the portal's site (INSTALLED_APPS names this instead of the admin)."""

from django.contrib.admin.apps import AdminConfig


class PortalAdminConfig(AdminConfig):
    """The admin, served by PortalAdminSite: staff need their second factor there too."""

    default_site = "apps.accounts.admin_site.PortalAdminSite"
