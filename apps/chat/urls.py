from django.urls import path

from apps.chat import views

urlpatterns = [
    path("", views.chat_index, name="chat"),
    path("new/", views.chat_new, name="chat-new"),
    path("<int:pk>/", views.conversation_page, name="chat-conversation"),
    path("<int:pk>/settings/", views.conversation_settings, name="chat-settings"),
    path("<int:pk>/run/", views.conversation_switch_run, name="chat-switch-run"),
    path("messages/<int:pk>.json", views.message_json, name="chat-message"),
]
