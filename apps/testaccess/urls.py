from django.urls import path, re_path

from apps.testaccess import views

app_name = "testaccess"

urlpatterns = [
    path(
        "office-hours/test-accesses/",
        views.TestAccessListView.as_view(),
        name="test_access_list",
    ),
    path(
        "office-hours/members/<int:member_pk>/test-access/",
        views.TestAccessSectionView.as_view(),
        name="test_access_section",
    ),
    # One view per action; one name, so {% url 'testaccess:test_access_action' pk 'grant' %} works.
    *(
        re_path(
            rf"^office-hours/members/(?P<member_pk>[0-9]+)/test-access/(?P<action>{view.action})/$",
            view.as_view(),
            name="test_access_action",
        )
        for view in (views.TestAccessGrantView, views.TestAccessExtendView, views.TestAccessEndView)
    ),
    path(
        "office-hours/members/<int:pk>/grant-test-access/",
        views.MemberTestAccessView.as_view(),
        name="member_test_access",
    ),
]
