"""testaccess's part in memberships (apps/members/extensions.py): the shaping row goes when a
member is checked in or leaves; the panel and the older grant action on the member page."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.members.extensions import MemberExtension
from apps.testaccess.models import TestAccess
from apps.testaccess.views import MemberTestAccessView, member_test_access_context

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest
    from django.views import View

    from apps.members.models import Member


class TestAccessMemberExtension(MemberExtension):
    """Registered by TestAccessConfig.ready()."""

    __test__ = False  # not a pytest class

    def member_checking_in(self, *, member: Member, actor: User | None) -> None:
        TestAccess.objects.filter(member=member).delete()  # no longer shaped

    def member_ending(self, *, member: Member, actor: User) -> None:
        TestAccess.objects.filter(member=member).delete()

    def member_page_context(self, *, request: HttpRequest, member: Member) -> dict[str, Any]:
        if not has_role(request.user, *STAFF_ROLES):
            return {}
        return member_test_access_context(request=request, member=member)

    def member_action_views(self) -> tuple[type[View], ...]:
        return (MemberTestAccessView,)
