; Inno Setup 6 script for the Windows installer, dist\FastMTP-Chat-Setup-<version>.exe.
; Build on Windows after `python installers\build.py` (which makes dist\fastmtp-chat\):
;   iscc installers\fastmtp-chat.iss
; The version comes from the build: the ProductVersion that the spec writes into fastmtp-chat.exe
; (app.__version__). `iscc /DAppVersion=X.Y.Z ...` overrides it.
; Not built or run here (Linux): tests/unit/installers/test_installers_windows_macos.py checks that the names below are
; the ones the spec produces, and that the icon exists.
;
; A per-user install (no administrator rights) into %LOCALAPPDATA%\Programs\FastMTP Chat. The app keeps
; its own data (models, built backends, the build cache, chats, settings) in %LOCALAPPDATA%\fastmtp-chat,
; outside {app}: uninstalling keeps that folder unless the user answers Yes when the uninstaller asks
; (a silent uninstall always keeps it).

; The COLLECT folder of the spec (bundle.APP_NAME)
#define DistFolder "fastmtp-chat"
; The windowed program (console=False): the Start-menu entry, the desktop icon, "Start after install"
#define WindowedExe "FastMTP Chat.exe"
; The console program, for the CLI: `fastmtp-chat.exe backend doctor`
#define ConsoleExe "fastmtp-chat.exe"
; The app's data folder under %LOCALAPPDATA% (app.core.paths.APP_NAME, through platformdirs)
#define DataFolder "fastmtp-chat"
#define AppName "FastMTP Chat"

#define BuiltConsoleExe AddBackslash(SourcePath) + "..\dist\" + DistFolder + "\" + ConsoleExe
#ifndef AppVersion
  #ifexist BuiltConsoleExe
    #define AppVersion GetStringFileInfo(BuiltConsoleExe, "ProductVersion")
  #else
    #error Build the app first (python installers\build.py), or pass /DAppVersion=X.Y.Z
  #endif
#endif

[Setup]
AppId={{6C1F3E1A-7A0B-4E5E-9C52-FA57C0FA57C0}
AppName={#AppName}
AppVersion={#AppVersion}
AppVerName={#AppName} {#AppVersion}
AppPublisher={#AppName}
DefaultDirName={localappdata}\Programs\{#AppName}
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
OutputDir=..\dist
OutputBaseFilename=FastMTP-Chat-Setup-{#AppVersion}
SetupIconFile=..\resources\icons\fastmtp-chat.ico
UninstallDisplayIcon={app}\{#WindowedExe}
UninstallDisplayName={#AppName}
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[InstallDelete]
; An update replaces the whole bundle: no module or DLL of the older version stays behind.
Type: filesandordirs; Name: "{app}\_internal"

[Files]
Source: "..\dist\{#DistFolder}\*"; DestDir: "{app}"; Flags: recursesubdirs createallsubdirs ignoreversion

[Icons]
Name: "{autoprograms}\{#AppName}"; Filename: "{app}\{#WindowedExe}"; WorkingDir: "{app}"
Name: "{autodesktop}\{#AppName}"; Filename: "{app}\{#WindowedExe}"; WorkingDir: "{app}"; Tasks: desktopicon

[Run]
Filename: "{app}\{#WindowedExe}"; Description: "{cm:LaunchProgram,{#AppName}}"; Flags: nowait postinstall skipifsilent

[UninstallDelete]
; The app writes nothing into {app} (its data goes to %LOCALAPPDATA%\{#DataFolder}); this clears anything
; else that appeared inside its own bundle folder.
Type: filesandordirs; Name: "{app}\_internal"

[Code]
procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);
var
  DataDir: String;
begin
  if CurUninstallStep = usPostUninstall then
  begin
    DataDir := ExpandConstant('{localappdata}\{#DataFolder}');
    if DirExists(DataDir) and not UninstallSilent() then
      if MsgBox('Also delete your models, built backends, chats and settings in' + #13#10 + DataDir + '?' + #13#10#13#10 +
                'Choose No to keep them for a later install.', mbConfirmation, MB_YESNO or MB_DEFBUTTON2) = IDYES then
        DelTree(DataDir, True, True, True);
  end;
end;
