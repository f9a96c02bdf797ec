; Inno Setup script for the Windows installer (FastMTP-Chat-Setup-<version>.exe).
; Build on Windows after `python installers\build.py --no-tarball`:
;   iscc /DAppVersion=0.1.0 installers\fastmtp-chat.iss
; It packs dist\fastmtp-chat\ (the PyInstaller one-folder app) into a per-user install; not built or tested here.

#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif

[Setup]
AppId={{6C1F3E1A-7A0B-4E5E-9C52-FA57C0FA57C0}
AppName=FastMTP Chat
AppVersion={#AppVersion}
AppPublisher=FastMTP Chat
DefaultDirName={localappdata}\Programs\FastMTP Chat
DefaultGroupName=FastMTP Chat
PrivilegesRequired=lowest
OutputDir=..\dist
OutputBaseFilename=FastMTP-Chat-Setup-{#AppVersion}
Compression=lzma2/max
SolidCompression=yes
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible

[Files]
Source: "..\dist\fastmtp-chat\*"; DestDir: "{app}"; Flags: recursesubdirs createallsubdirs ignoreversion

[Icons]
Name: "{group}\FastMTP Chat"; Filename: "{app}\fastmtp-chat.exe"
Name: "{userdesktop}\FastMTP Chat"; Filename: "{app}\fastmtp-chat.exe"; Tasks: desktopicon

[Tasks]
Name: "desktopicon"; Description: "Create a desktop shortcut"; Flags: unchecked

[Run]
Filename: "{app}\fastmtp-chat.exe"; Description: "Start FastMTP Chat"; Flags: nowait postinstall skipifsilent
