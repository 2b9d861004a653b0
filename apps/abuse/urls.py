from django.urls import path

from apps.abuse import views

app_name = "abuse"
urlpatterns = [
    path("abuse/lookup/", views.AbuseLookupView.as_view(), name="lookup"),
]
