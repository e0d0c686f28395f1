from django.urls import path

from apps.chat import compare, keeping, views

urlpatterns = [
    path("", views.chat_index, name="chat"),
    path("new/", views.chat_new, name="chat-new"),
    path("<int:pk>/", views.conversation_page, name="chat-conversation"),
    path("<int:pk>/send/", views.conversation_send, name="chat-send"),
    path("<int:pk>/settings/", views.conversation_settings, name="chat-settings"),
    path("<int:pk>/run/", views.conversation_switch_run, name="chat-switch-run"),
    path("<int:pk>/load/", views.conversation_load, name="chat-load"),
    path("messages/<int:pk>.json", views.message_json, name="chat-message"),
    # Keeping conversations (apps/chat/keeping.py): export, share links, presets.
    path("<int:pk>/export.md", keeping.export_md, name="chat-export-md"),
    path("<int:pk>/export.json", keeping.export_json, name="chat-export-json"),
    path("<int:pk>/share/", keeping.conversation_share, name="chat-share"),
    path("<int:pk>/unshare/", keeping.conversation_unshare, name="chat-unshare"),
    path("<int:pk>/preset/", keeping.preset_apply, name="chat-preset-apply"),
    path("shared/<slug:token>/", keeping.shared_page, name="chat-shared"),
    path("shared/<slug:token>/export.md", keeping.shared_md, name="chat-shared-export-md"),
    path("shared/<slug:token>/export.json", keeping.shared_json, name="chat-shared-export-json"),
    path("presets/new/", keeping.preset_new, name="chat-preset-new"),
    path("presets/<int:pk>/delete/", keeping.preset_delete, name="chat-preset-delete"),
    path("compare/new/", compare.compare_new, name="chat-compare-new"),
    path("compare/<int:pk>/", compare.compare_page, name="chat-compare"),
    path("compare/<int:pk>/send/", compare.compare_send, name="chat-compare-send"),
    path("compare/<int:pk>/settings/", compare.compare_settings, name="chat-compare-settings"),
    path("compare/<int:pk>/vote/", compare.compare_vote, name="chat-compare-vote"),
    path("arena/", compare.arena_page, name="chat-arena"),
]
